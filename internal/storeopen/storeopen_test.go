package storeopen_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/internal/testkit/testdb"
)

func TestMySQLNative(t *testing.T) {
	for in, want := range map[string]string{
		"mysql://lead:lead@127.0.0.1:3306/leadership":                  "lead:lead@tcp(127.0.0.1:3306)/leadership",
		"mysql://lead:p%40ss@db/app?parseTime=true":                    "lead:p@ss@tcp(db:3306)/app?parseTime=true",
		"mysql://root@[::1]:3307/x?clientFoundRows=true&timeout=2s":    "root@tcp([::1]:3307)/x?clientFoundRows=true&timeout=2s",
		"mysql://u@h/db?parseTime=true&routines=false&timeout=2s":      "u@tcp(h:3306)/db?parseTime=true&timeout=2s",
		"mysql://u@h/db?routines=true":                                 "u@tcp(h:3306)/db",
		"mysql://u@unix(/run/m.sock)/db?routines=false&parseTime=true": "u@unix(/run/m.sock)/db?parseTime=true",
		"mysql://u@localhost/db?socket=/run/m.sock&routines=false":     "u@unix(/run/m.sock)/db",
	} {
		got, err := storeopen.MySQLNative(in)
		if err != nil || got != want {
			t.Errorf("MySQLNative(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"mysql://u:secret@/db", "mysql://u:secret@h:1", "mysql://u:secret@h:1/db?badparam=%zz", "mysql://u:secret@h:1/db?timeout=forever"} {
		_, err := storeopen.MySQLNative(in)
		if !errors.Is(err, leadership.ErrInvalidArgument) || strings.Contains(err.Error(), "secret") {
			t.Errorf("MySQLNative(%q) = %v, want ErrInvalidArgument without the password", in, err)
		}
	}
	if _, err := storeopen.MySQLNative("mysql://u:secret@h/db?routines=maybe"); !errors.Is(err, leadership.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), `routines="maybe": want routines=false`) || strings.Contains(err.Error(), "secret") {
		t.Errorf("routines=maybe: %v, want ErrInvalidArgument naming the parameter's values", err)
	}
	// Without a password, the driver's complaint reads as it is.
	in := "mysql://root@h:1/db?timeout=forever"
	if _, err := storeopen.MySQLNative(in); !errors.Is(err, leadership.ErrInvalidArgument) || !strings.Contains(err.Error(), `invalid duration "forever"`) {
		t.Errorf("MySQLNative(%q) = %v, want ErrInvalidArgument naming the bad duration", in, err)
	}
}

func TestMySQLURL(t *testing.T) {
	for in, want := range map[string]string{
		"lead:lead@tcp(127.0.0.1:3306)/leadership":        "mysql://lead:lead@127.0.0.1:3306/leadership",
		"lead:p@ss/w?rd@tcp(db:3306)/app?parseTime=true":  "mysql://lead:p%40ss%2Fw%3Frd@db:3306/app",
		"root@tcp([::1]:3307)/x":                          "mysql://root@[::1]:3307/x",
		"mysql://lead:lead@127.0.0.1:3306/leadership?x=1": "mysql://lead:lead@127.0.0.1:3306/leadership?x=1",
	} {
		got, err := storeopen.MySQLURL(in)
		if err != nil || got != want {
			t.Errorf("MySQLURL(%q) = %q, %v; want %q", in, got, err, want)
			continue
		}
		// The URL reads back as the same address, user, password and database.
		back, err := storeopen.MySQLNative(got)
		if err != nil || !strings.HasPrefix(in, "mysql://") && !strings.HasPrefix(in, strings.SplitN(back, "?", 2)[0]) {
			t.Errorf("MySQLNative(MySQLURL(%q)) = %q, %v; want it back", in, back, err)
		}
	}
	for _, in := range []string{"lead:lead@unix(/run/mysqld.sock)/leadership", "not a dsn"} {
		if _, err := storeopen.MySQLURL(in); !errors.Is(err, leadership.ErrInvalidArgument) {
			t.Errorf("MySQLURL(%q) = %v, want ErrInvalidArgument", in, err)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://app:s3cret@db:5432/app?sslmode=disable": "postgres://app:xxxxx@db:5432/app?sslmode=disable",
		"mysql://u:p@ss:w@rd@h/db":                          "mysql://u:xxxxx@h/db",
		"postgres://app@db/app":                             "postgres://app@db/app",
		"sqlite:flags.db":                                   "sqlite:flags.db",
	} {
		if got := storeopen.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestKind(t *testing.T) {
	for in, want := range map[string]string{"sqlite:x.db": storeopen.SQLite, "postgresql://h/db": storeopen.Postgres, "postgres://h/db": storeopen.Postgres, "mysql://h/db": storeopen.MySQL} {
		if got, err := storeopen.Kind(in); err != nil || got != want {
			t.Errorf("Kind(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "flags.db", "oracle://u:secret@h/db"} {
		if _, err := storeopen.Kind(in); !errors.Is(err, leadership.ErrInvalidArgument) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Kind(%q) = %v, want ErrInvalidArgument without the password", in, err)
		}
	}
}

func TestOpenSQLite(t *testing.T) {
	o, err := storeopen.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "f.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := o.Store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestOpenMySQLRoutinesParam checks that routines=false in a mysql:// DSN
// selects the store's statement mode (Migrate creates no procedure, and
// Acquire works without one) and that the default is the procedure.
func TestOpenMySQLRoutinesParam(t *testing.T) {
	cfg, err := gomysql.ParseDSN(testdb.MySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := context.Background()
	for param, procedures := range map[string]int{"?routines=false": 0, "": 2} { // leadership_acquire and leadership_acquire_many
		c := testdb.FreshMySQL(t)
		dsn, err := storeopen.MySQLURL(c.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		o, err := storeopen.Open(ctx, dsn+param)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		if err := o.Store.Migrate(ctx); err != nil {
			t.Fatalf("%q: Migrate: %v", param, err)
		}
		var n int
		if err := admin.QueryRow(`SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = ?`, c.DBName).Scan(&n); err != nil || n != procedures {
			t.Fatalf("%q: %d procedures after Migrate (%v), want %d", param, n, err, procedures)
		}
		if res, err := o.Store.Acquire(ctx, leadership.Request{Name: "f", Holder: "a", Lease: time.Minute}); err != nil || !res.Acquired {
			t.Fatalf("%q: Acquire = %+v, %v", param, res, err)
		}
	}
}

func TestOpenPostgresBadDSNHidesPassword(t *testing.T) {
	_, err := storeopen.Open(context.Background(), "postgres://u:secret@h:notaport/db")
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("Open = %v, want an error without the password", err)
	}
}

// FuzzDSN checks that no DSN makes the parsers panic, and that no error
// shows a password: the fuzzer's two strings are joined by a password
// between : and @, where every form may put one. (Open is left to
// TestNoErrorShowsThePassword: its pools dial what the fuzzer writes.)
func FuzzDSN(f *testing.F) {
	for _, s := range [][2]string{{"postgres://u", "h/db"}, {"mysql://u", "h:3306/db?parseTime=true"}, {"u", "tcp(h)/db?timeout=x"},
		{"host=h user=u password=x", "y port=z"}, {"mysql://", ""}, {"mysql://", "h/d?%"}, {"", ""}, {"sqlite:x", "y.db"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, before, after string) {
		const pw = "Zq9Wx7Yv"
		dsn := before + ":" + pw + "@" + after
		if _, err := storeopen.Kind(dsn); err != nil && strings.Contains(err.Error(), pw) {
			t.Fatalf("Kind's error shows the password: %v", err)
		}
		if _, err := storeopen.MySQLNative(dsn); err != nil && strings.Contains(err.Error(), pw) {
			t.Fatalf("MySQLNative's error shows the password: %v", err)
		}
	})
}

// TestMySQLUnixSocket: a mysql:// DSN names a unix socket as unix(PATH)
// in place of the host, or with a socket= parameter.
func TestMySQLUnixSocket(t *testing.T) {
	for in, want := range map[string]string{
		"mysql://app:p%40ss@unix(/run/mysqld/mysqld.sock)/app":                "app:p@ss@unix(/run/mysqld/mysqld.sock)/app",
		"mysql://root@unix(/tmp/my.sock)/x?timeout=2s":                        "root@unix(/tmp/my.sock)/x?timeout=2s",
		"mysql://unix(/tmp/my.sock)/x":                                        "unix(/tmp/my.sock)/x",
		"mysql://app:pw@localhost/app?socket=/run/mysqld/mysqld.sock":         "app:pw@unix(/run/mysqld/mysqld.sock)/app",
		"mysql://app:pw@/app?socket=%2Frun%2Fmysqld%2Fmysqld.sock&timeout=2s": "app:pw@unix(/run/mysqld/mysqld.sock)/app?timeout=2s",
	} {
		got, err := storeopen.MySQLNative(in)
		if err != nil || got != want {
			t.Errorf("MySQLNative(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"mysql://u:secret@unix()/db", "mysql://u:secret@unix(/s)/", "mysql://u:secret@h/db?socket=", "mysql://u:secret@unix(/s)/db?timeout=forever"} {
		_, err := storeopen.MySQLNative(in)
		if !errors.Is(err, leadership.ErrInvalidArgument) || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "unix(") {
			t.Errorf("MySQLNative(%q) = %v, want ErrInvalidArgument naming the forms, without the password", in, err)
		}
	}
}

// TestOpenPostgresPingsOnlyLongIdleConnections: the pool Open makes keeps
// an attempt at one round trip (postgres.ShouldPing), instead of pgxpool's
// ping of every connection idle for more than a second. The pool connects
// lazily, so no server is needed.
func TestOpenPostgresPingsOnlyLongIdleConnections(t *testing.T) {
	o, err := storeopen.Open(context.Background(), "postgres://u@127.0.0.1:1/db")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	shouldPing := o.Pool.Config().ShouldPing
	if shouldPing == nil {
		t.Fatal("the pool has pgxpool's default ShouldPing: a ping before every attempt idle for over a second")
	}
	for idle, want := range map[time.Duration]bool{5 * time.Second: false, 2 * time.Minute: true} {
		if got := shouldPing(context.Background(), pgxpool.ShouldPingParams{IdleDuration: idle}); got != want {
			t.Errorf("ShouldPing after %v idle = %v, want %v", idle, got, want)
		}
	}
}
