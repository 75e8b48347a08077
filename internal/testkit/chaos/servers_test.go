//go:build unix

package chaos

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the admin connection to the private MariaDB

	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// A private server is one this test starts, crashes and restarts itself,
// in a temporary directory on a free port: the shared servers of the other
// tests are never touched. Without the binaries, the test is skipped, or
// fails under LEADERSHIP_TEST_REQUIRE_DB=1.
type privateServer struct {
	dsn  string
	stop func() // crash the server (no clean shutdown)
	run  func() // start it again
}

// EnvPGBin names the directory of the PostgreSQL server binaries (initdb,
// pg_ctl); the default is the newest /usr/lib/postgresql/*/bin.
const EnvPGBin = "LEADERSHIP_TEST_PG_BIN"

// startPrivatePostgres initialises and starts a PostgreSQL server of its own.
func startPrivatePostgres(t *testing.T) *privateServer {
	t.Helper()
	bin := pgBin(t, "a private PostgreSQL server for the restart scenario")
	dir, cred := testdb.ServerDir(t, "postgres")
	data, port := filepath.Join(dir, "data"), testdb.FreePort(t)
	runAs(t, cred, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-sync")
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", port, dir)
	s := &privateServer{dsn: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	s.run = func() {
		runAs(t, cred, filepath.Join(bin, "pg_ctl"), "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start")
	}
	// -m immediate: every server process quits at once, without a
	// checkpoint; the next start recovers from the WAL, as after a crash.
	s.stop = func() { runAs(t, cred, filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop") }
	s.run()
	t.Cleanup(func() {
		_ = testdb.Command(cred, filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "stop").Run()
	})
	return s
}

// pgBin returns the directory of the PostgreSQL server binaries, or skips
// or fails t (testdb.Unavailable) saying what needed them.
func pgBin(t *testing.T, what string) string {
	t.Helper()
	bin := os.Getenv(EnvPGBin)
	if bin == "" {
		dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		sort.Strings(dirs)
		if len(dirs) > 0 {
			bin = dirs[len(dirs)-1]
		}
	}
	if _, err := os.Stat(filepath.Join(bin, "pg_ctl")); err != nil {
		testdb.Unavailable(t, what, EnvPGBin, "no pg_ctl")
	}
	return bin
}

// startPrivateMariaDB initialises and starts a MariaDB server of its own
// (mariadb-install-db, mariadbd), without grant tables: any user may log
// in, which is all a throwaway server needs. args are added to mariadbd's
// options.
func startPrivateMariaDB(t *testing.T, args ...string) *privateServer {
	t.Helper()
	installDB, err := exec.LookPath("mariadb-install-db")
	mariadbd := "/usr/sbin/mariadbd"
	if _, serr := os.Stat(mariadbd); err != nil || serr != nil {
		testdb.Unavailable(t, "a private MariaDB server for the restart scenario", "PATH", "no mariadb-install-db or /usr/sbin/mariadbd")
	}
	dir, cred := testdb.ServerDir(t, "mysql")
	data, port := filepath.Join(dir, "data"), testdb.FreePort(t)
	install := []string{"--no-defaults", "--datadir=" + data}
	if cred != nil {
		install = append(install, "--user=mysql")
	}
	runAs(t, nil, installDB, append(install, "--auth-root-authentication-method=normal", "--skip-test-db")...)
	var proc *exec.Cmd
	var exited chan struct{}
	s := &privateServer{dsn: fmt.Sprintf("mysql://root@127.0.0.1:%d/leadership", port)}
	s.run = func() {
		opts := append([]string{"--no-defaults", "--datadir=" + data, "--socket=" + filepath.Join(dir, "sock"),
			"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--skip-grant-tables", "--skip-log-bin",
			"--innodb-buffer-pool-size=16M", "--log-error=" + filepath.Join(dir, "err.log")}, args...)
		proc = testdb.Command(cred, mariadbd, opts...)
		if err := proc.Start(); err != nil {
			t.Fatalf("start mariadbd: %v", err)
		}
		exited = make(chan struct{})
		go func(p *exec.Cmd, done chan struct{}) { _ = p.Wait(); close(done) }(proc, exited)
		admin, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if _, err = admin.Exec("CREATE DATABASE IF NOT EXISTS leadership"); err == nil {
				return
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(dir, "err.log"))
				t.Fatalf("private mariadbd did not answer in 60 s: %v\n%s", err, log)
			}
		}
	}
	// SIGKILL: the server dies with no shutdown; InnoDB recovers at start.
	s.stop = func() { _ = proc.Process.Signal(syscall.SIGKILL); <-exited }
	s.run()
	t.Cleanup(func() { s.stop() })
	return s
}

// runAs runs a command to completion and fails the test with its output.
func runAs(t *testing.T, cred *syscall.Credential, name string, args ...string) {
	t.Helper()
	out, err := testdb.Command(cred, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}
