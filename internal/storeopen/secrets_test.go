package storeopen_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// dsnShape builds a DSN of one form from a password, a port and extra
// parameters (in the form's own syntax, "" for none).
type dsnShape struct {
	name  string
	build func(pw, port, param string) string
	param string // a parameter the driver refuses
	typo  func(dsn string) string
}

// dsnShapes are the forms users paste, with passwords as they paste them
// (unescaped where the form allows it).
func dsnShapes() []dsnShape {
	pgURL := func(user string) func(pw, port, param string) string {
		return func(pw, port, param string) string {
			return "postgres://" + user + ":" + pw + "@127.0.0.1:" + port + "/leadership?sslmode=disable" + amp(param)
		}
	}
	myURL := func(user string) func(pw, port, param string) string {
		return func(pw, port, param string) string {
			return "mysql://" + user + ":" + pw + "@127.0.0.1:" + port + "/leadership" + question(param)
		}
	}
	scheme := func(from, to string) func(string) string {
		return func(dsn string) string { return strings.Replace(dsn, from, to, 1) }
	}
	return []dsnShape{
		{"postgres URL", pgURL("postgres"), "sslmode=bogus", scheme("postgres://", "postgress://")},
		{"postgresql URL with @ in the user", func(pw, port, param string) string {
			return "postgresql://app@corp:" + pw + "@127.0.0.1:" + port + "/leadership" + question(param)
		}, "sslmode=bogus", scheme("postgresql://", "jdbc:postgresql://")},
		{"libpq key/value", func(pw, port, param string) string {
			return "host=127.0.0.1 port=" + port + " user=postgres password=" + pw + " dbname=leadership sslmode=disable " + param
		}, "sslmode=bogus", scheme("host=", "=host=")},
		{"libpq key/value, quoted with spaces", func(pw, port, param string) string {
			return "host=127.0.0.1 port=" + port + " user=postgres password='" + strings.ReplaceAll(pw, "'", `\'`) + " and more' dbname=leadership " + param
		}, "sslmode=bogus", scheme("host=", "=host=")},
		{"libpq key/value, spaces around =", func(pw, port, param string) string {
			return "host = 127.0.0.1 port = " + port + " user = postgres password = " + pw + " dbname = leadership " + param
		}, "sslmode = bogus", scheme("host =", "= host =")},
		{"postgres URL with password=", func(pw, port, param string) string {
			return "postgres://postgres@127.0.0.1:" + port + "/leadership?password=" + url.QueryEscape(pw) + amp(param)
		}, "sslmode=bogus", scheme("postgres://", "pg://")},
		{"mysql URL", myURL("lead"), "timeout=forever", scheme("mysql://", "mysq://")},
		{"mysql URL with @ in the user", myURL("app@corp"), "routines=maybe", scheme("mysql://", "mariadb://")},
		{"go-sql-driver tcp", func(pw, port, param string) string {
			return "lead:" + pw + "@tcp(127.0.0.1:" + port + ")/leadership" + question(param)
		}, "timeout=forever", scheme("@tcp(", "@tcpp(")},
		{"go-sql-driver unix socket", func(pw, port, param string) string {
			return "lead:" + pw + "@unix(/nonexistent/" + port + ".sock)/leadership" + question(param)
		}, "allowAllFiles=maybe", scheme("@unix(", "@unx(")},
	}
}

func amp(p string) string {
	if p == "" {
		return ""
	}
	return "&" + p
}

func question(p string) string {
	if p == "" {
		return ""
	}
	return "?" + p
}

// secrets are the passwords the cases carry: a plain one, and one with the
// characters that make forms ambiguous.
var secrets = []string{"S3cr3t-pw", "p@ss:w/rd?x"}

// leaks reports whether text shows pw, raw or escaped.
func leaks(text, pw string) bool {
	for _, form := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw), url.UserPassword("u", pw).String()[2:]} {
		if strings.Contains(text, form) {
			return true
		}
	}
	return false
}

// TestNoErrorShowsThePassword opens DSNs of every accepted form that fail
// in every way a DSN can (a bad port, a parameter the driver refuses, a
// misspelt scheme or form, no server, a wrong password at a real server,
// no database), and checks that no error shows the password, and that
// the errors about the DSN's text say which forms are expected.
func TestNoErrorShowsThePassword(t *testing.T) {
	t.Parallel()
	pgPort, myPort := "5432", "3306"
	if dsn := os.Getenv(testdb.EnvPostgres); dsn != "" {
		if u, err := url.Parse(dsn); err == nil && u.Port() != "" {
			pgPort = u.Port()
		}
	}
	if dsn := os.Getenv(testdb.EnvMySQL); dsn != "" {
		if cfg, err := gomysql.ParseDSN(dsn); err == nil {
			if _, p, ok := strings.Cut(cfg.Addr, ":"); ok {
				myPort = p
			}
		}
	}
	for _, shape := range dsnShapes() {
		for _, pw := range secrets {
			port := pgPort
			if strings.Contains(shape.name, "mysql") || strings.Contains(shape.name, "go-sql-driver") {
				port = myPort
			}
			cases := []struct {
				kind, dsn string
				usage     bool // a malformed DSN: the error says which forms are expected
			}{
				// go-sql-driver's form leaves the address to the dialer.
				{"bad port", shape.build(pw, "notaport", ""), !strings.HasPrefix(shape.name, "go-sql-driver")},
				{"refused parameter", shape.build(pw, port, shape.param), true},
				{"misspelt form", shape.typo(shape.build(pw, port, "")), true},
				{"no server", shape.build(pw, "1", ""), false},
				{"wrong password", shape.build(pw, port, ""), false},
			}
			for _, c := range cases {
				t.Run(fmt.Sprintf("%s/%s/%s", shape.name, pw, c.kind), func(t *testing.T) {
					t.Parallel()
					err := openAndMigrate(c.dsn)
					if err == nil {
						t.Fatalf("opening a DSN with a %s succeeded", c.kind)
					}
					if leaks(err.Error(), pw) {
						t.Fatalf("the error shows the password:\n%v", err)
					}
					if strings.Contains(err.Error(), c.dsn) {
						t.Fatalf("the error shows the DSN:\n%v", err)
					}
					if c.usage && !strings.Contains(err.Error(), "want ") {
						t.Errorf("the error does not say which forms are expected:\n%v", err)
					}
					if c.usage && !errors.Is(err, leadership.ErrInvalidArgument) {
						t.Errorf("the error does not wrap ErrInvalidArgument:\n%v", err)
					}
				})
			}
		}
	}
}

// openAndMigrate opens dsn and, if that succeeds (drivers connect
// lazily), migrates, which connects.
func openAndMigrate(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := storeopen.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer o.Close()
	return o.Store.Migrate(ctx)
}

// TestTheFormsUsersPasteOpen: libpq's key/value form and go-sql-driver's
// own form name the same servers as the URLs.
func TestTheFormsUsersPasteOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, err := url.Parse(testdb.FreshPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := pg.User.Password()
	kv := fmt.Sprintf("host=%s port=%s user=%s password='%s' dbname=%s sslmode=disable search_path=%s",
		pg.Hostname(), pg.Port(), pg.User.Username(), pw, strings.TrimPrefix(pg.Path, "/"), pg.Query().Get("search_path"))
	my := testdb.FreshMySQL(t).FormatDSN() + "?routines=false"
	for _, dsn := range []string{kv, my} {
		kind, err := storeopen.Kind(dsn)
		if err != nil {
			t.Fatalf("Kind: %v", err)
		}
		o, err := storeopen.Open(ctx, dsn)
		if err != nil {
			t.Fatalf("%s: Open: %v", kind, err)
		}
		defer o.Close()
		if err := o.Store.Migrate(ctx); err != nil {
			t.Fatalf("%s: Migrate: %v", kind, err)
		}
		if res, err := o.Store.Acquire(ctx, leadership.Request{Name: "pasted", Holder: "a", Lease: time.Minute}); err != nil || !res.Acquired {
			t.Fatalf("%s: Acquire = %+v, %v", kind, res, err)
		}
	}
}
