package testdb

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the root connection
)

// MariaDB is a MariaDB server of a test's own, for settings that are global
// on a server (init_connect, a global autocommit) and would change the
// shared server under every other test.
type MariaDB struct {
	// Root is a connection pool of root, who may change global settings.
	Root *sql.DB
	port int
	// start runs mariadbd on the data directory and waits until it
	// answers; kill ends it with SIGKILL.
	start func(t testing.TB)
	kill  func()
}

// StartMariaDB initialises (mariadb-install-db) and starts a MariaDB server
// with the extra server options args, in a temporary directory, on a free
// port of the loopback interface only, and stops it when the test ends.
// Unlike the chaos suite's servers it keeps its grant tables, so privileges
// (and init_connect, which skips privileged users) behave as in production.
// Without the binaries the test is skipped, or fails when [Required].
func StartMariaDB(t testing.TB, args ...string) *MariaDB {
	t.Helper()
	installDB, err := exec.LookPath("mariadb-install-db")
	const mariadbd = "/usr/sbin/mariadbd"
	if _, serr := os.Stat(mariadbd); err != nil || serr != nil {
		Unavailable(t, "a private MariaDB server", "PATH", "no mariadb-install-db or "+mariadbd)
	}
	dir, cred := ServerDir(t, "mysql")
	data, port := filepath.Join(dir, "data"), FreePort(t)
	// A temporary directory of the server's own: in the shared /tmp,
	// concurrent bootstraps were seen to fail on each other's temporary
	// tables ("Error on delete of '/tmp/#sql-temptable-…'").
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := os.Chown(tmp, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	install := []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--auth-root-authentication-method=normal", "--skip-test-db"}
	if cred != nil {
		install = append(install, "--user=mysql")
	}
	if out, err := Command(nil, installDB, install...).CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	// mariadb-install-db made root@127.0.0.1 without a password.
	root, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	m := &MariaDB{Root: root, port: port, kill: func() {}}
	m.start = func(t testing.TB) {
		t.Helper()
		cmd := Command(cred, mariadbd, append([]string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp,
			"--socket=" + filepath.Join(dir, "sock"), "--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1",
			"--skip-log-bin", "--innodb-buffer-pool-size=16M", "--log-error=" + filepath.Join(dir, "err.log")}, args...)...)
		if err := cmd.Start(); err != nil {
			t.Fatalf("start mariadbd: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		m.kill = func() { _ = cmd.Process.Signal(syscall.SIGKILL); <-exited }
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if err = root.Ping(); err == nil {
				return
			}
			select {
			case <-exited:
				deadline = time.Now()
			default:
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(dir, "err.log"))
				t.Fatalf("private mariadbd did not answer in 60 s: %v\n%s", err, log)
			}
		}
	}
	t.Cleanup(func() { m.kill() })
	m.start(t)
	return m
}

// Crash kills the server with SIGKILL (no shutdown: InnoDB loses what it
// had not flushed, as innodb_flush_log_at_trx_commit allows) and starts it
// again on the same data directory and port, waiting until it answers.
func (m *MariaDB) Crash(t testing.TB) {
	t.Helper()
	m.kill()
	m.start(t)
}

// NewDatabase creates a database and a user named after prefix with all
// privileges on it and none on the server (like an application's user),
// and returns that user's go-sql-driver DSN.
func (m *MariaDB) NewDatabase(t testing.TB, prefix string) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := prefix + "_" + hex.EncodeToString(b[:])
	for _, q := range []string{
		"CREATE DATABASE `" + name + "`",
		"CREATE USER '" + name + "'@'127.0.0.1' IDENTIFIED BY 'secret'",
		"GRANT ALL ON `" + name + "`.* TO '" + name + "'@'127.0.0.1'",
	} {
		if _, err := m.Root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return fmt.Sprintf("%s:secret@tcp(127.0.0.1:%d)/%s", name, m.port, name)
}

// NewUser creates, for the database of dsn (one of NewDatabase's DSNs),
// the user named after it and suffix with only the given privileges: each
// grant is a GRANT statement's privileges and object, with %s for the
// quoted database ("SELECT ON %s.leadership_flags"). It returns the
// user's name and go-sql-driver DSN.
func (m *MariaDB) NewUser(t testing.TB, dsn, suffix string, grants ...string) (name, userDSN string) {
	t.Helper()
	db := dsn[strings.LastIndex(dsn, "/")+1:]
	name = db + suffix
	account := "'" + name + "'@'127.0.0.1'"
	queries := []string{"CREATE USER " + account + " IDENTIFIED BY 'secret'"}
	for _, g := range grants {
		queries = append(queries, "GRANT "+strings.ReplaceAll(g, "%s", "`"+db+"`")+" TO "+account)
	}
	for _, q := range queries {
		if _, err := m.Root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return name, fmt.Sprintf("%s:secret@tcp(127.0.0.1:%d)/%s", name, m.port, db)
}

// ServerDir makes a temporary directory the server's OS user owns, removed
// when the test ends, and returns the credentials to run the server with:
// that user when the test runs as root (servers refuse to run as root),
// else none.
func ServerDir(t testing.TB, osUser string) (string, *Credential) {
	t.Helper()
	dir, err := os.MkdirTemp("", "leadership-"+osUser+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() != 0 {
		return dir, nil
	}
	u, err := user.Lookup(osUser)
	if err != nil {
		Unavailable(t, "a private server", "PATH", "no OS user "+osUser)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	return dir, credential(uid, gid)
}

// Command is a command run with the credentials cred (nil: the test's own),
// in the temporary directory.
func Command(cred *Credential, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = os.TempDir()
	setCredential(cmd, cred)
	return cmd
}

// FreePort returns a TCP port on loopback nobody listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Port is the server's TCP port on 127.0.0.1.
func (m *MariaDB) Port() int { return m.port }
