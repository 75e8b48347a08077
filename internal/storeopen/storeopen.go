// Package storeopen opens a [leadership.Store] named by a DSN string, for
// the command-line tool, the examples and the test programs. The forms:
//
//	sqlite:PATH
//	postgres://USER:PASS@HOST:PORT/DB?PARAMS (or postgresql://)
//	host=HOST port=PORT dbname=DB user=USER password=PASS   (libpq's key/value form)
//	mysql://USER:PASS@HOST:PORT/DB?PARAMS (or @unix(/PATH)/DB, ?socket=/PATH)
//	USER:PASS@tcp(HOST:PORT)/DB?PARAMS                      (go-sql-driver's own form, or @unix(/PATH)/DB)
//
// # Passwords
//
// No error of this package contains the DSN it was given, parsed or not:
// an error says which part is wrong and which forms are expected. What a
// driver says about a DSN it refused is passed on only with every part of
// the DSN that could be a password masked, or not at all when such a part
// is too short to mask without mangling the text.
package storeopen

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
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
const Usage = "sqlite:PATH; " + PostgresUsage + "; " + MySQLUsage

// PostgresUsage describes the accepted PostgreSQL forms, for errors.
const PostgresUsage = "postgres://USER:PASS@HOST:PORT/DB?PARAMS or host=HOST port=PORT dbname=DB user=USER password=PASS"

// MySQLUsage describes the accepted MySQL forms, for errors.
const MySQLUsage = "mysql://USER:PASS@HOST:PORT/DB?PARAMS or USER:PASS@tcp(HOST:PORT)/DB?PARAMS " +
	"(a unix socket: mysql://USER:PASS@unix(/PATH/TO/SOCKET)/DB, mysql://USER:PASS@localhost/DB?socket=/PATH/TO/SOCKET or USER:PASS@unix(/PATH/TO/SOCKET)/DB)"

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
// are accepted. The error never contains dsn.
func Kind(dsn string) (string, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		return SQLite, nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"), keyValue.MatchString(dsn):
		return Postgres, nil
	case strings.HasPrefix(dsn, "mysql://"), mysqlDriverForm.MatchString(dsn):
		return MySQL, nil
	case dsn == "":
		return "", fmt.Errorf("%w: empty DSN: want %s", leadership.ErrInvalidArgument, Usage)
	}
	return "", fmt.Errorf("%w: DSN (not shown: it may hold a password) %s: want %s", leadership.ErrInvalidArgument, unknownForm(dsn), Usage)
}

var (
	// keyValue matches the start of libpq's key/value form: a keyword and =.
	keyValue = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)
	// mysqlDriverForm matches go-sql-driver's USER[:PASS]@NET(ADDR)/DB and
	// USER[:PASS]@/DB, whose password may hold any character.
	mysqlDriverForm = regexp.MustCompile(`^.*@(?:tcp[46]?|unix)\(.*\)/|^[^:/@]+(?::.*)?@/`)
	// scheme matches a URL scheme, which cannot hold a password.
	scheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)
)

// unknownForm says what dsn, of no accepted form, looks like, without
// showing any of it but a URL scheme.
func unknownForm(dsn string) string {
	switch m := scheme.FindStringSubmatch(dsn); {
	case strings.HasPrefix(strings.ToLower(dsn), "jdbc:"):
		return "is a JDBC URL, which is not read here: write it as postgres://USER:PASS@HOST:PORT/DB or mysql://USER:PASS@HOST:PORT/DB"
	case m != nil:
		return fmt.Sprintf("has the scheme %q, which is none of sqlite:, postgres://, postgresql://, mysql://", m[1])
	case !strings.ContainsAny(dsn, "@=:"):
		return "is not of any DSN form (a SQLite file is named sqlite:PATH)"
	}
	return "is not of any DSN form"
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
			if errors.Is(err, leadership.ErrInvalidArgument) {
				return nil, fmt.Errorf("%w: postgres DSN%s: %s: want %s", leadership.ErrInvalidArgument, pgForm(dsn), reason(err, dsn), PostgresUsage)
			}
			return nil, errors.New(reason(err, dsn))
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
			return nil, fmt.Errorf("mysql: %s", reason(err, dsn))
		}
		s, err := mysql.New(db, opts...)
		if err != nil {
			db.Close()
			return nil, err
		}
		return &Opened{Store: s, Kind: kind, DB: db, close: func() { s.Close(); db.Close() }}, nil
	}
}

// MySQLNative turns a MySQL DSN into go-sql-driver's form, checking it.
// The accepted forms are
//
//	mysql://USER:PASS@HOST:PORT/DB?PARAMS                    -> USER:PASS@tcp(HOST:PORT)/DB?PARAMS (port 3306 by default)
//	mysql://USER:PASS@unix(/run/mysqld/mysqld.sock)/DB?PARAMS -> USER:PASS@unix(/run/mysqld/mysqld.sock)/DB?PARAMS
//	mysql://USER:PASS@localhost/DB?socket=/run/mysqld/mysqld.sock&PARAMS (the host is ignored and may be empty)
//	USER:PASS@tcp(HOST:PORT)/DB?PARAMS, USER:PASS@unix(PATH)/DB?PARAMS (go-sql-driver's own, as it is)
//
// In a mysql:// URL, USER and PASS are percent-encoded as in any URL;
// PARAMS are go-sql-driver's, and the store's own [RoutinesParam], which
// is checked and left out.
func MySQLNative(dsn string) (string, error) {
	native, _, err := mysqlNative(dsn)
	return native, err
}

// RoutinesParam is the parameter of a MySQL DSN that selects the mysql
// store's mode: routines=false is statement mode ([mysql.WithoutRoutines]),
// routines=true (the default) the stored procedure.
const RoutinesParam = "routines"

// mysqlNative is MySQLNative, also returning the store's options the DSN
// selects.
func mysqlNative(dsn string) (string, []mysql.Option, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: mysql DSN (not shown: it may hold a password): %s: want %s", leadership.ErrInvalidArgument, why, MySQLUsage)
	}
	var head, rawQuery string // the DSN in go-sql-driver's form before ?, and its parameters
	if !strings.HasPrefix(dsn, "mysql://") {
		// go-sql-driver's form: its parameters follow the first ? after
		// the last /, since the password may hold either.
		slash := strings.LastIndex(dsn, "/")
		head, rawQuery = dsn, ""
		if q := strings.Index(dsn[slash+1:], "?"); slash >= 0 && q >= 0 {
			head, rawQuery = dsn[:slash+1+q], dsn[slash+1+q+1:]
		}
	} else {
		cfg := gomysql.NewConfig()
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
		if user != nil {
			cfg.User = user.Username()
			cfg.Passwd, _ = user.Password()
		}
		head = cfg.FormatDSN()
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
	native := head
	if len(params) > 0 {
		native += "?" + strings.Join(params, "&")
	}
	cfg, err := gomysql.ParseDSN(native)
	if err != nil {
		return "", nil, bad(reason(err, dsn))
	}
	if cfg.DBName == "" {
		return "", nil, bad("no database name")
	}
	return native, opts, nil
}

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
		return "", fmt.Errorf("%w: mysql DSN (not shown: it may hold a password): %s", leadership.ErrInvalidArgument, reason(err, native))
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

// Redact returns dsn with every part that could be a password replaced
// by xxxxx (more than the password, when the DSN is malformed), for a test
// or a log that must name a DSN. The errors of this package never contain
// a DSN at all.
func Redact(dsn string) string {
	for _, p := range passwords(dsn) {
		dsn = strings.ReplaceAll(dsn, p, "xxxxx")
	}
	return dsn
}

// reason is the text of err, a driver's complaint about dsn, with every
// part of dsn that could be a password masked; it leaves out pgx's copy of
// the DSN. When such a part is shorter than four bytes and appears in the
// text, masking it would mangle the text, so reason says only that the
// driver refused the DSN.
func reason(err error, dsn string) string {
	text := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		// "cannot parse `DSN`: what (why)": keep what and why.
		text = pe.Error()
		if i := strings.LastIndex(text, "`: "); strings.HasPrefix(text, "cannot parse `") && i >= 0 {
			text = text[i+3:]
		}
	}
	for _, p := range passwords(dsn) {
		if !strings.Contains(text, p) {
			continue
		}
		if len(p) < 4 {
			return "refused by the driver (its message is not shown: it could reveal the password)"
		}
		text = strings.ReplaceAll(text, p, "xxxxx")
	}
	return text
}

// passwords returns every part of dsn that could be a password in any of
// the accepted forms, parsed as the drivers parse them or not, longest
// first, each also percent-decoded: in a URL, what lies between the first
// : after :// and the last @; in go-sql-driver's form, between the first :
// and the last @ before the last /; between every : and the next @; the
// value of every password= and sslpassword= parameter or key/value pair,
// quoted or not. It errs on the side of masking too much.
func passwords(dsn string) []string {
	var found []string
	add := func(p string) {
		if p == "" {
			return
		}
		found = append(found, p)
		for _, unescape := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
			if u, err := unescape(p); err == nil && u != p && u != "" {
				found = append(found, u)
			}
		}
	}
	userPassword := func(s string) {
		if at := strings.LastIndex(s, "@"); at >= 0 {
			if c := strings.Index(s[:at], ":"); c >= 0 {
				add(s[c+1 : at])
			}
		}
	}
	rest := dsn
	if m := scheme.FindStringIndex(dsn); m != nil {
		rest = dsn[m[1]:]
		userPassword(rest)
		if !strings.Contains(rest, "@") {
			if c := strings.Index(rest, ":"); c >= 0 {
				add(rest[c+1:]) // USER:PASS without @: a malformed URL
			}
		}
	}
	userPassword(rest)
	if slash := strings.LastIndex(rest, "/"); slash >= 0 {
		userPassword(rest[:slash])
	}
	for i := range rest { // what lies between each : and the next @, in a form too broken to tell
		if rest[i] == ':' {
			if at := strings.IndexByte(rest[i+1:], '@'); at >= 0 {
				add(rest[i+1 : i+1+at])
			}
		}
	}
	for _, m := range passwordValue.FindAllStringSubmatchIndex(dsn, -1) {
		v := dsn[m[1]:]
		switch {
		case strings.HasPrefix(v, "'"):
			end := len(v)
			for i := 1; i < len(v); i++ {
				if v[i] == '\\' {
					i++
				} else if v[i] == '\'' {
					end = i + 1
					break
				}
			}
			add(v[:end])
			add(strings.Trim(v[:end], "'"))
			add(strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(strings.Trim(v[:end], "'")))
		default:
			if end := strings.IndexAny(v, " \t\n\r&"); end >= 0 {
				v = v[:end]
			}
			add(v)
		}
	}
	slices.SortFunc(found, func(a, b string) int { // longest first, equal ones together
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(found)
}

// passwordValue matches password= and sslpassword= (any case, spaces
// around =) up to the start of the value.
var passwordValue = regexp.MustCompile(`(?i)(?:ssl)?password\s*=\s*`)

// pgForm names the PostgreSQL form of dsn, for errors.
func pgForm(dsn string) string {
	if keyValue.MatchString(dsn) {
		return " (key/value form; not shown: it may hold a password)"
	}
	return " (not shown: it may hold a password)"
}
