//go:build unix

package chaos

import (
	"net"
	"net/url"
	"testing"

	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/internal/testkit/testdb"
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
	dsn, err := storeopen.MySQLURL(testdb.MySQL(t))
	if err != nil {
		t.Fatalf("%s: the chaos suite needs a TCP address: %v", testdb.EnvMySQL, err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	via := func(addr string) string {
		v := *u
		v.Host = addr
		return v.String()
	}
	return database{dsn: dsn, addr: u.Host, via: via}
}
