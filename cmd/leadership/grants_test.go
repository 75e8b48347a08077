//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// endsNamingGrant runs run and migrate with dsn, a role or user that
// lacks the privilege grant, and checks that each ends within a lease
// (15 s) with exit 69 and an error that contains want.
func endsNamingGrant(t *testing.T, dsn, grant, want string) {
	t.Helper()
	for _, args := range [][]string{{"run", "--dsn", dsn, "--name", "g", "--", "true"}, {"migrate", "--dsn", dsn}} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var out, errs strings.Builder
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr, cmd.Dir = &out, &errs, t.TempDir()
		begin := time.Now()
		_ = cmd.Run()
		took, killed := time.Since(begin), ctx.Err() != nil
		cancel()
		switch code := cmd.ProcessState.ExitCode(); {
		case killed:
			t.Errorf("without %s, %s still ran after %v (killed): %s", grant, args[0], took.Round(time.Millisecond), errs.String())
		case code != exitUnavailable || !strings.Contains(errs.String(), want):
			t.Errorf("without %s, %s = %d after %v:\n%s%s\nwant %d naming %q", grant, args[0], code, took.Round(time.Millisecond), out.String(), errs.String(), exitUnavailable, want)
		case took > 15*time.Second:
			t.Errorf("without %s, %s took %v", grant, args[0], took)
		}
	}
}

func randomHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TestEveryMissingGrantEndsInAnErrorNamingIt: a PostgreSQL role, or a
// MariaDB user, that has every privilege docs/operations.md lists for an
// application whose administrator applied the migrations but one, gets
// from leadership run and leadership migrate an error naming the missing
// privilege, within seconds; none hangs (a role without SELECT on
// leadership_schema_migrations made both hang in pgxpool's Close).
func TestEveryMissingGrantEndsInAnErrorNamingIt(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		admin := testdb.FreshPostgres(t)
		if code, _, errs := cli(t, "migrate", "--dsn", admin); code != 0 {
			t.Fatalf("migrate as the administrator: %s", errs)
		}
		u, err := url.Parse(admin)
		if err != nil {
			t.Fatal(err)
		}
		schema := u.Query().Get("search_path")
		conn := pgConn(t, admin)
		grants := []string{
			"USAGE ON SCHEMA " + schema,
			"SELECT ON leadership_flags", "INSERT ON leadership_flags", "UPDATE ON leadership_flags",
			"SELECT ON leadership_incarnation", "INSERT ON leadership_incarnation",
			"SELECT ON leadership_guard", "UPDATE ON leadership_guard",
			"SELECT ON leadership_schema_migrations",
		}
		for i, missing := range grants {
			role := fmt.Sprintf("%s_g%d", schema, i)
			exec := func(sql string) {
				t.Helper()
				if _, err := conn.Exec(context.Background(), sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			exec("CREATE ROLE " + role + " LOGIN PASSWORD 'pw'")
			t.Cleanup(func() {
				_, _ = conn.Exec(context.Background(), "DROP OWNED BY "+role)
				_, _ = conn.Exec(context.Background(), "DROP ROLE "+role)
			})
			for _, g := range grants {
				if g != missing {
					exec("GRANT " + g + " TO " + role)
				}
			}
			r := *u
			r.User = url.UserPassword(role, "pw")
			want := "GRANT " + missing + ` TO "` + role + `";`
			if i == 0 {
				want = "lacks USAGE on it"
			}
			endsNamingGrant(t, r.String(), missing, want)
		}
	})
	for _, mode := range []string{"", "?routines=false"} {
		t.Run("mysql"+mode, func(t *testing.T) {
			t.Parallel()
			cfg := testdb.FreshMySQL(t)
			admin, err := storeopen.MySQLURL(cfg.FormatDSN())
			if err != nil {
				t.Fatal(err)
			}
			if code, _, errs := cli(t, "migrate", "--dsn", admin+mode); code != 0 {
				t.Fatalf("migrate as the administrator: %s", errs)
			}
			db, err := sql.Open("mysql", cfg.FormatDSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() }) // after the users' cleanups, which use it
			// where the test's user connects from, as the server sees it
			var host string
			if err := db.QueryRow(`SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', -1)`).Scan(&host); err != nil {
				t.Fatal(err)
			}
			grants := []string{
				"SELECT ON leadership_flags", "INSERT ON leadership_flags", "UPDATE ON leadership_flags",
				"SELECT ON leadership_guard", "UPDATE ON leadership_guard",
				"SELECT ON leadership_incarnation", "INSERT ON leadership_incarnation",
				"SELECT ON leadership_schema_migrations",
			}
			if mode == "" {
				grants = append(grants, "EXECUTE ON PROCEDURE leadership_acquire", "EXECUTE ON PROCEDURE leadership_acquire_many")
			}
			for i, missing := range grants {
				user := fmt.Sprintf("lt_%s_g%d", randomHex(), i)
				account := fmt.Sprintf("'%s'@'%s'", user, host)
				exec := func(q string) {
					t.Helper()
					if _, err := db.Exec(q); err != nil {
						t.Fatalf("%s: %v (scripts/test-databases.sh grants the test user CREATE USER, and ALL WITH GRANT OPTION on leadership_%%)", q, err)
					}
				}
				exec("CREATE USER " + account + " IDENTIFIED BY 'pw'")
				t.Cleanup(func() { _, _ = db.Exec("DROP USER " + account) })
				for _, g := range grants {
					if g != missing {
						on, what, _ := strings.Cut(g, " ON ")
						exec("GRANT " + on + " ON " + strings.Replace(what, "leadership_", "`"+cfg.DBName+"`.leadership_", 1) + " TO " + account)
					}
				}
				c := *cfg
				c.User, c.Passwd = user, "pw"
				dsn, err := storeopen.MySQLURL(c.FormatDSN())
				if err != nil {
					t.Fatal(err)
				}
				want := "GRANT " + missing
				if procedure, ok := strings.CutPrefix(missing, "EXECUTE ON PROCEDURE "); ok {
					want = "create the procedure " + procedure + ", which the user cannot see (if it exists, grant the user EXECUTE on it)"
				}
				endsNamingGrant(t, dsn+mode, missing, want)
			}
		})
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		if os.Geteuid() != 0 {
			t.Skip("needs root, to run the command as another user")
		}
		// The command runs as nobody: it must reach the binary.
		if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
		dir, err := os.MkdirTemp("", "leadership-grants")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "flags.db")
		if code, _, errs := cli(t, "migrate", "--dsn", "sqlite:"+path); code != 0 {
			t.Fatal(errs)
		}
		asNobody := func(wantCode int, want string) {
			t.Helper()
			var out, errs strings.Builder
			cmd := exec.Command(bin, "status", "--dsn", "sqlite:"+path)
			cmd.Stdout, cmd.Stderr, cmd.Dir = &out, &errs, dir
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			_ = cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != wantCode || !strings.Contains(out.String()+errs.String(), want) {
				t.Errorf("status as nobody = %d:\n%s%s\nwant %d and %q", code, out.String(), errs.String(), wantCode, want)
			}
		}
		asNobody(exitUnavailable, "may not read and write it (mode 0600, owner uid 0 gid 0)")
		if err := os.Chmod(path, 0o666); err != nil {
			t.Fatal(err)
		}
		asNobody(exitUnavailable, "may not create files in "+dir+" (mode 0755, owner uid 0 gid 0), as SQLite must for the -wal and -shm files")
		// The directory writable by nobody's group, not by every user (there,
		// root's file would be refused as one anyone could have planted).
		if err := os.Chown(dir, 0, 65534); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o775); err != nil {
			t.Fatal(err)
		}
		asNobody(exitOK, "NAME")
	})
}

// TestASignalEndsAStuckCommand: a leadership migrate stuck behind a lock
// another session holds (golang-migrate waits without a deadline) ends
// within seconds of SIGTERM, with 128+15.
func TestASignalEndsAStuckCommand(t *testing.T) {
	t.Parallel()
	dsn := testdb.FreshPostgres(t)
	if code, _, errs := cli(t, "migrate", "--dsn", dsn); code != 0 {
		t.Fatalf("migrate: %s", errs)
	}
	ctx := context.Background()
	locker := pgConn(t, dsn)
	if _, err := locker.Exec(ctx, `BEGIN; LOCK TABLE leadership_schema_migrations IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "migrate", "--dsn", dsn)
	var errs syncBuffer
	cmd.Stderr = &errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	select {
	case <-exited:
		t.Fatalf("migrate ended while the version table was locked: %s", errs.String())
	case <-time.After(2 * time.Second):
	}
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("migrate still runs 10 s after SIGTERM: %s", errs.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) || !strings.Contains(errs.String(), "SIGTERM") {
		t.Fatalf("migrate after SIGTERM: exit %d, %q; want %d naming the signal", code, errs.String(), 128+int(syscall.SIGTERM))
	}
	t.Logf("migrate ended %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
}

// pgConn connects to dsn for the test's own statements, until it ends.
func pgConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
