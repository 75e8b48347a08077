//go:build linux

package main

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// secretPW is the password of the DSNs whose output is checked.
const secretPW = "S3cr3t-pw"

// dsnFile writes dsn into a file only its owner may read, and returns the
// file's path.
func dsnFile(t *testing.T, dsn string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(path, []byte(dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestNoOutputShowsThePassword runs status, and run with logs at debug
// level, on DSNs of every form that fail in each way a DSN can (a typo in
// the form, a parameter the driver refuses, a bad port, no server, a wrong
// password at the real servers), given by --dsn, LEADERSHIP_DSN and
// --dsn-file, and checks that neither stdout nor stderr (where the logs
// go) shows the password.
func TestNoOutputShowsThePassword(t *testing.T) {
	t.Parallel()
	pgHost, myHost := "127.0.0.1:5432", "127.0.0.1:3306"
	if u, err := url.Parse(os.Getenv(testdb.EnvPostgres)); err == nil && u.Host != "" {
		pgHost = u.Host
	}
	if cfg, err := gomysql.ParseDSN(os.Getenv(testdb.EnvMySQL)); err == nil && cfg.Addr != "" {
		myHost = cfg.Addr
	}
	pgIP, pgPort, _ := strings.Cut(pgHost, ":")
	pw := secretPW
	dsns := map[string]string{
		"issue: go-sql-driver's form":                  "user:" + pw + "@tcp(" + myHost + ")/db",
		"issue: libpq key/value":                       "host=" + pgIP + " port=" + pgPort + " user=app password=" + pw + " dbname=db",
		"issue: mysql URL, @ in user, bad parameter":   "mysql://app@corp:" + pw + "@" + myHost + "/db?timeout=forever",
		"libpq key/value, quoted, bad port":            "host=" + pgIP + " port=x user=app password='" + pw + " 2' dbname=db",
		"libpq key/value, misspelt key":                "hots=" + pgIP + " password=" + pw,
		"postgres URL, bad parameter":                  "postgres://app:" + pw + "@" + pgHost + "/db?sslmode=bogus",
		"postgres URL, @ in user, wrong password":      "postgres://postgres@corp:" + pw + "@" + pgHost + "/leadership?sslmode=disable",
		"postgres URL, wrong password":                 "postgres://postgres:" + pw + "@" + pgHost + "/leadership?sslmode=disable",
		"postgres URL, no server":                      "postgres://app:" + pw + "@127.0.0.1:1/db?connect_timeout=2",
		"misspelt scheme":                              "postgress://app:" + pw + "@" + pgHost + "/db",
		"mysql URL, wrong password":                    "mysql://lead:" + pw + "@" + myHost + "/leadership",
		"go-sql-driver's form, unix socket, no file":   "lead:" + pw + "@unix(/nonexistent.sock)/leadership",
		"go-sql-driver's form, refused parameter":      "lead:" + pw + "@tcp(" + myHost + ")/leadership?routines=maybe",
		"go-sql-driver's form, misspelt network":       "lead:" + pw + "@tcpp(" + myHost + ")/leadership",
		"mysql URL, no database, password has @ and /": "mysql://lead:p@ss/" + pw + "@" + myHost,
	}
	for name, dsn := range dsns {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			file := dsnFile(t, dsn)
			for _, c := range []struct {
				how  string
				env  []string
				args []string
			}{
				{"--dsn", nil, []string{"status", "--dsn", dsn}},
				{"LEADERSHIP_DSN", []string{"LEADERSHIP_DSN=" + dsn}, []string{"status"}},
				{"--dsn-file", nil, []string{"run", "--dsn-file", file, "--log-level", "debug", "--name", "n", "--", "true"}},
				{"LEADERSHIP_DSN to run", []string{"LEADERSHIP_DSN=" + dsn, "LEADERSHIP_LOG_LEVEL=debug"}, []string{"run", "--name", "n", "--", "true"}},
			} {
				code, out, errs := cliEnv(t, c.env, c.args...)
				if code == 0 {
					t.Errorf("%s: exit 0, want a failure:\n%s%s", c.how, out, errs)
				}
				if strings.Contains(out+errs, pw) || strings.Contains(out+errs, url.QueryEscape(pw)) {
					t.Errorf("%s: the output shows the password:\n%s%s", c.how, out, errs)
				}
			}
		})
	}
}

// TestTheCommandDoesNotInheritTheDSN: run removes LEADERSHIP_DSN from its
// command's environment unless --pass-dsn asks for it, and passes
// LEADERSHIP_DSN_FILE on; a leadership command inside, given no DSN,
// refuses the default file rather than use another database.
func TestTheCommandDoesNotInheritTheDSN(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dsn := "sqlite:" + filepath.Join(dir, "flags.db")
	envOf := func(env []string, args ...string) string {
		t.Helper()
		out := filepath.Join(t.TempDir(), "env")
		args = append(args, "--name", uniqueName(t), "--", "sh", "-c", `env > "$0"`, out)
		if code, _, errs := cliEnv(t, env, append([]string{"run"}, args...)...); code != 0 {
			t.Fatalf("run %q = %d: %s", args, code, errs)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if env := envOf([]string{"LEADERSHIP_DSN=" + dsn}); strings.Contains(env, "LEADERSHIP_DSN=") {
		t.Errorf("the command's environment holds LEADERSHIP_DSN:\n%s", env)
	}
	if env := envOf([]string{"LEADERSHIP_DSN=" + dsn}, "--pass-dsn"); !strings.Contains(env, "LEADERSHIP_DSN="+dsn+"\n") {
		t.Errorf("with --pass-dsn, the command's environment lacks LEADERSHIP_DSN:\n%s", env)
	}
	file := dsnFile(t, dsn)
	if env := envOf([]string{"LEADERSHIP_DSN_FILE=" + file}); !strings.Contains(env, "LEADERSHIP_DSN_FILE="+file+"\n") || strings.Contains(env, "LEADERSHIP_DSN=") {
		t.Errorf("with LEADERSHIP_DSN_FILE, the command's environment:\n%s", env)
	}
	// A leadership command inside the command.
	code, _, errs := cliEnv(t, []string{"LEADERSHIP_DSN=" + dsn}, "run", "--name", uniqueName(t), "--", bin, "status")
	if code != exitUsage || !strings.Contains(errs, "does not pass LEADERSHIP_DSN on") {
		t.Errorf("status inside run without a DSN = %d, want %d naming the missing DSN:\n%s", code, exitUsage, errs)
	}
	if code, out, errs := cliEnv(t, []string{"LEADERSHIP_DSN_FILE=" + file}, "run", "--name", uniqueName(t), "--", bin, "status"); code != 0 || !strings.Contains(out, "NAME") {
		t.Errorf("status inside run with LEADERSHIP_DSN_FILE = %d:\n%s%s", code, out, errs)
	}
}

// TestDSNFile: --dsn-file (LEADERSHIP_DSN_FILE) reads the DSN from a file
// other users cannot read, without ever showing its content; --dsn and
// --dsn-file exclude each other, but one on the command line overrides
// the other's environment variable.
func TestDSNFile(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "flags.db")
	good := dsnFile(t, dsn)
	if code, out, errs := cli(t, "migrate", "--dsn-file", good); code != 0 || !strings.Contains(out, "sqlite") {
		t.Fatalf("migrate --dsn-file = %d %q %q", code, out, errs)
	}
	write := func(content string, mode os.FileMode) string {
		path := filepath.Join(t.TempDir(), "dsn")
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	secret := "postgres://app:" + secretPW + "@127.0.0.1:1/db"
	for _, c := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"world-readable", nil, []string{"status", "--dsn-file", write(secret, 0o644)}, exitUsage, "every user may read this file (mode 0644)"},
		{"empty", nil, []string{"status", "--dsn-file", write("\n", 0o600)}, exitUsage, "empty"},
		{"two lines", nil, []string{"status", "--dsn-file", write(secret+"\n"+secret, 0o600)}, exitUsage, "more than one line"},
		{"missing", nil, []string{"status", "--dsn-file", "/nonexistent/dsn"}, exitUsage, "no such file"},
		{"unknown form", nil, []string{"status", "--dsn-file", write("oracle://app:"+secretPW+"@h/db", 0o600)}, exitUsage, "the DSN in --dsn-file"},
		{"both flags", nil, []string{"status", "--dsn", dsn, "--dsn-file", good}, exitUsage, "--dsn and --dsn-file both name the database"},
		{"both variables", []string{"LEADERSHIP_DSN=" + dsn, "LEADERSHIP_DSN_FILE=" + good}, []string{"status"}, exitUsage, "LEADERSHIP_DSN and LEADERSHIP_DSN_FILE both"},
		{"--dsn over LEADERSHIP_DSN_FILE", []string{"LEADERSHIP_DSN_FILE=/nonexistent/dsn"}, []string{"status", "--dsn", dsn}, exitOK, "NAME"},
		{"--dsn-file over LEADERSHIP_DSN", []string{"LEADERSHIP_DSN=oracle://x"}, []string{"status", "--dsn-file", good}, exitOK, "NAME"},
	} {
		code, out, errs := cliEnv(t, c.env, c.args...)
		if code != c.code || !strings.Contains(out+errs, c.want) {
			t.Errorf("%s: %q = %d:\n%s%s\nwant %d and %q", c.name, c.args, code, out, errs, c.code, c.want)
		}
		if strings.Contains(out+errs, secretPW) {
			t.Errorf("%s: the output shows the password:\n%s%s", c.name, out, errs)
		}
	}
}

// TestPasswordFromPgpassFile: a PostgreSQL DSN without a password takes
// it from the file PGPASSFILE names (or ~/.pgpass), as libpq does: pgx
// reads it.
func TestPasswordFromPgpassFile(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testdb.FreshPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	pw, ok := u.User.Password()
	if !ok {
		t.Skip("the test server's DSN has no password")
	}
	u.User = url.User(u.User.Username())
	pgpass := filepath.Join(t.TempDir(), "pgpass")
	line := strings.Join([]string{u.Hostname(), u.Port(), strings.TrimPrefix(u.Path, "/"), u.User.Username(), pw}, ":")
	if err := os.WriteFile(pgpass, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noPgpass := "PGPASSFILE=" + filepath.Join(t.TempDir(), "none")
	if code, _, errs := cliEnv(t, []string{noPgpass}, "migrate", "--dsn", u.String()); code != exitUnavailable {
		t.Fatalf("migrate without the password = %d: %s", code, errs)
	}
	if code, out, errs := cliEnv(t, []string{"PGPASSFILE=" + pgpass}, "migrate", "--dsn", u.String()); code != 0 {
		t.Fatalf("migrate with PGPASSFILE = %d: %s%s", code, out, errs)
	}
}
