// Package storeopen opens a [leadership.Store] named by a DSN string, for
// the command-line tool, the examples and the test programs: sqlite:PATH,
// postgres://… (or postgresql://…) and mysql://user:pass@host:port/db?….
package storeopen

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/mysql"
	"github.com/dbflag/leadership/postgres"
	"github.com/dbflag/leadership/sqlite"
)

// Kinds of database a DSN can name.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
	MySQL    = "mysql"
)

// Usage describes the accepted DSN forms, for help texts and errors.
const Usage = "sqlite:PATH, postgres://USER:PASS@HOST:PORT/DB?… or mysql://USER:PASS@HOST:PORT/DB?… (a unix socket: mysql://USER:PASS@unix(/PATH/TO/SOCKET)/DB or ?socket=/PATH/TO/SOCKET)"

// Opened is an open store and what closes it.
type Opened struct {
	Store leadership.Store
	Kind  string // SQLite, Postgres or MySQL
	// DB is the store's database (SQLite, MySQL) and Pool its pool
	// (Postgres), for transactions fenced by the store's Fence.
	DB    *sql.DB
	Pool  *pgxpool.Pool
	close func()
}

// Close closes the pool or database the store uses. Close the flags first.
func (o *Opened) Close() { o.close() }

// Kind reports which database dsn names, or an error saying which forms
// are accepted. It never includes a password in the error.
func Kind(dsn string) (string, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		return SQLite, nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return Postgres, nil
	case strings.HasPrefix(dsn, "mysql://"):
		return MySQL, nil
	case dsn == "":
		return "", fmt.Errorf("%w: empty DSN: want %s", leadership.ErrInvalidArgument, Usage)
	}
	return "", fmt.Errorf("%w: DSN %q: unknown scheme: want %s", leadership.ErrInvalidArgument, Redact(dsn), Usage)
}

// Open opens the store dsn names. Connecting is lazy for Postgres and
// MySQL: a server that is down shows at the first statement.
func Open(ctx context.Context, dsn string) (*Opened, error) {
	kind, err := Kind(dsn)
	if err != nil {
		return nil, err
	}
	switch kind {
	case SQLite:
		db, err := sqlite.Open(strings.TrimPrefix(dsn, "sqlite:"))
		if err != nil {
			return nil, err
		}
		s, err := sqlite.New(db)
		if err != nil {
			db.Close()
			return nil, err
		}
		return &Opened{Store: s, Kind: kind, DB: db, close: func() { db.Close() }}, nil
	case Postgres:
		pool, err := postgres.Open(ctx, dsn) // ShouldPing: one round trip per attempt
		if err != nil {
			return nil, err
		}
		s, err := postgres.New(pool)
		if err != nil {
			pool.Close()
			return nil, err
		}
		return &Opened{Store: s, Kind: kind, Pool: pool, close: pool.Close}, nil
	default:
		native, opts, err := mysqlNative(dsn)
		if err != nil {
			return nil, err
		}
		db, err := sql.Open("mysql", native)
		if err != nil {
			return nil, fmt.Errorf("mysql: %v", err)
		}
		s, err := mysql.New(db, opts...)
		if err != nil {
			db.Close()
			return nil, err
		}
		return &Opened{Store: s, Kind: kind, DB: db, close: func() { s.Close(); db.Close() }}, nil
	}
}

// MySQLNative turns a mysql:// DSN into go-sql-driver's form, checking
// it. The accepted forms are
//
//	mysql://USER:PASS@HOST:PORT/DB?PARAMS                    -> USER:PASS@tcp(HOST:PORT)/DB?PARAMS (port 3306 by default)
//	mysql://USER:PASS@unix(/run/mysqld/mysqld.sock)/DB?PARAMS -> USER:PASS@unix(/run/mysqld/mysqld.sock)/DB?PARAMS
//	mysql://USER:PASS@localhost/DB?socket=/run/mysqld/mysqld.sock&PARAMS (the host is ignored and may be empty)
//
// USER and PASS are percent-encoded as in any URL; PARAMS are
// go-sql-driver's, and the store's own [RoutinesParam], which is checked
// and left out.
func MySQLNative(dsn string) (string, error) {
	native, _, err := mysqlNative(dsn)
	return native, err
}

// RoutinesParam is the parameter of a mysql:// DSN that selects the mysql
// store's mode: routines=false is statement mode ([mysql.WithoutRoutines]),
// routines=true (the default) the stored procedure.
const RoutinesParam = "routines"

// mysqlNative is MySQLNative, also returning the store's options the DSN
// selects.
func mysqlNative(dsn string) (string, []mysql.Option, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: mysql DSN %q: %s: want %s", leadership.ErrInvalidArgument, Redact(dsn), why, MySQLUsage)
	}
	cfg := gomysql.NewConfig()
	var rawQuery string
	var user *url.Userinfo
	if m := mysqlUnix.FindStringSubmatch(dsn); m != nil {
		// url.Parse cannot read unix(PATH) as a host: take it apart here and
		// let url.Parse decode the rest, with a placeholder host.
		u, err := url.Parse("mysql://" + m[1] + "unix/" + m[3])
		if err != nil {
			return "", nil, bad("not a URL") // url's error would show the password
		}
		if m[2] == "" {
			return "", nil, bad("empty socket path in unix()")
		}
		cfg.Net, cfg.Addr, user, rawQuery = "unix", m[2], u.User, u.RawQuery
		cfg.DBName = strings.TrimPrefix(u.Path, "/")
	} else {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", nil, bad("not a URL") // url's error would show the password
		}
		if u.Scheme != "mysql" {
			return "", nil, bad("scheme is not mysql")
		}
		q := u.Query()
		user, rawQuery, cfg.DBName = u.User, u.RawQuery, strings.TrimPrefix(u.Path, "/")
		switch socket := q.Get("socket"); {
		case q.Has("socket") && socket == "":
			return "", nil, bad("empty socket= parameter")
		case socket != "":
			q.Del("socket")
			cfg.Net, cfg.Addr, rawQuery = "unix", socket, q.Encode()
		case u.Host == "":
			return "", nil, bad("no host")
		default:
			cfg.Net, cfg.Addr = "tcp", u.Host
			if u.Port() == "" {
				cfg.Addr = u.Host + ":3306"
			}
		}
	}
	if cfg.DBName == "" || strings.Contains(cfg.DBName, "/") {
		return "", nil, bad("no database name")
	}
	var opts []mysql.Option
	var params []string
	for _, p := range strings.Split(rawQuery, "&") {
		key, value, _ := strings.Cut(p, "=")
		if key != RoutinesParam {
			if p != "" {
				params = append(params, p)
			}
			continue
		}
		routines, err := strconv.ParseBool(value)
		if err != nil {
			return "", nil, bad(fmt.Sprintf("%s=%q: want %s=false (statement mode: no stored procedure) or %s=true", RoutinesParam, value, RoutinesParam, RoutinesParam))
		}
		if !routines {
			opts = []mysql.Option{mysql.WithoutRoutines()}
		}
	}
	rawQuery = strings.Join(params, "&")
	if user != nil {
		cfg.User = user.Username()
		cfg.Passwd, _ = user.Password()
	}
	native := cfg.FormatDSN()
	if rawQuery != "" {
		native += "?" + rawQuery
	}
	if _, err := gomysql.ParseDSN(native); err != nil {
		why := err.Error()
		if cfg.Passwd != "" { // replacing "" would put xxxxx between every two characters
			why = strings.ReplaceAll(why, cfg.Passwd, "xxxxx")
		}
		return "", nil, bad(why)
	}
	return native, opts, nil
}

// MySQLUsage describes the accepted mysql:// forms, for errors.
const MySQLUsage = "mysql://USER:PASS@HOST:PORT/DB?PARAMS, mysql://USER:PASS@unix(/PATH/TO/SOCKET)/DB?PARAMS or mysql://USER:PASS@localhost/DB?socket=/PATH/TO/SOCKET"

// mysqlUnix matches mysql://[USERINFO@]unix(PATH)/DB[?PARAMS]: USERINFO@
// (with its @), PATH, and DB with its parameters.
var mysqlUnix = regexp.MustCompile(`^mysql://((?:.*@)?)unix\(([^)]*)\)/(.*)$`)

// MySQLURL is the inverse of [MySQLNative] for a TCP address: it turns
// go-sql-driver's USER:PASS@tcp(HOST:PORT)/DB (the form of
// LEADERSHIP_TEST_MYSQL_DSN) into mysql://USER:PASS@HOST:PORT/DB, escaping
// the user and password. Driver parameters are dropped. A DSN already in
// the mysql:// form is returned as it is.
func MySQLURL(native string) (string, error) {
	if strings.HasPrefix(native, "mysql://") {
		return native, nil
	}
	cfg, err := gomysql.ParseDSN(native)
	if err != nil {
		return "", fmt.Errorf("%w: mysql DSN: %v", leadership.ErrInvalidArgument, err)
	}
	if cfg.Net != "tcp" {
		return "", fmt.Errorf("%w: mysql DSN: network %q: want a TCP address, tcp(HOST:PORT)", leadership.ErrInvalidArgument, cfg.Net)
	}
	user := url.User(cfg.User)
	if cfg.Passwd != "" {
		user = url.UserPassword(cfg.User, cfg.Passwd)
	}
	return (&url.URL{Scheme: "mysql", User: user, Host: cfg.Addr, Path: "/" + cfg.DBName}).String(), nil
}

var userinfo = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9+.-]*://[^:@/]*):.*@`)

// Redact returns dsn with the password of a URL DSN replaced by xxxxx, for
// logs and error messages.
func Redact(dsn string) string {
	return userinfo.ReplaceAllString(dsn, "${1}:xxxxx@")
}
