package chaos

import (
	"net"
	"net/url"
	"testing"

	driver "github.com/go-sql-driver/mysql"

	"github.com/dbflag/leadership/internal/testdb"
)

// database is a networked database the scenarios run on.
type database struct {
	dsn  string
	addr string // host:port of the server
	// via returns the DSN reaching the server at addr instead (a proxy).
	via func(addr string) string
}

// postgresDB is the shared PostgreSQL server of the tests (testdb rules).
func postgresDB(t *testing.T) database {
	dsn := testdb.Postgres(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("%s: %v", testdb.EnvPostgres, err)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "5432")
	}
	return database{dsn: dsn, addr: addr, via: func(a string) string {
		v := *u
		v.Host = a
		return v.String()
	}}
}

// mysqlDB is the shared MariaDB or MySQL server of the tests (testdb
// rules), whose go-sql-driver DSN is turned into the mysql:// form the
// worker takes.
func mysqlDB(t *testing.T) database {
	cfg, err := driver.ParseDSN(testdb.MySQL(t))
	if err != nil {
		t.Fatalf("%s: %v", testdb.EnvMySQL, err)
	}
	if cfg.Net != "tcp" {
		t.Fatalf("%s: the chaos suite needs a TCP address, not %q", testdb.EnvMySQL, cfg.Net)
	}
	via := func(addr string) string {
		return (&url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: addr, Path: "/" + cfg.DBName}).String()
	}
	return database{dsn: via(cfg.Addr), addr: cfg.Addr, via: via}
}
