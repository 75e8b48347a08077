//go:build linux

package main

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// cliEnv runs the binary with extra environment variables.
func cliEnv(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb strings.Builder
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = &out, &errb, t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// TestUsageErrorComesFirst: a usage error is one line naming it, then a
// hint to --help, not the whole usage text.
func TestUsageErrorComesFirst(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "flags.db")
	for _, tc := range []struct {
		args       []string
		first, tip string
	}{
		{[]string{"run", "--dsn", dsn, "--bogus"}, "leadership run: flag provided but not defined: -bogus", "Run 'leadership run --help' for usage."},
		{[]string{"run", "--dsn", dsn, "--name", "x"}, "leadership run: usage: no command", "Run 'leadership run --help' for usage."},
		{[]string{"run", "--dsn", dsn, "--lease", "soon", "--name", "x", "--", "true"}, `leadership run: invalid value "soon" for flag -lease`, "Run 'leadership run --help' for usage."},
		{[]string{"status", "--dsn", dsn, "--log-level", "loud"}, `leadership: usage: --log-level "loud"`, "Run 'leadership help' for usage."},
		{[]string{"release", "--dsn", dsn}, "leadership release: usage: release takes one flag name", "Run 'leadership release --help' for usage."},
		{[]string{"run", "--dsn", dsn, "--name", "x", "--hold", "-1s", "--", "true"}, "leadership run: usage: --hold -1s is negative", "Run 'leadership run --help' for usage."},
		{[]string{"frobnicate"}, `leadership: unknown command "frobnicate"`, "Run 'leadership help' for usage."},
	} {
		code, out, errs := cli(t, tc.args...)
		lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
		if code != exitUsage || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], tc.first) || lines[1] != tc.tip {
			t.Errorf("leadership %q = %d, stdout %q, stderr:\n%s\nwant %d, then %q and %q alone", tc.args, code, out, errs, exitUsage, tc.first, tc.tip)
		}
	}
}

// TestFlagsAfterName: release, status and migrate take their flags after
// the positional argument too; run does not, since its positional
// arguments are the command's.
func TestFlagsAfterName(t *testing.T) {
	dir := t.TempDir()
	dsn := "sqlite:" + filepath.Join(dir, "flags.db")
	if code, out, errs := cli(t, "run", "--dsn", dsn, "--name", "job", "--", "true"); code != 0 {
		t.Fatalf("run = %d %q %q", code, out, errs)
	}
	if code, out, errs := cli(t, "release", "job", "--dsn", dsn); code != 0 || out != "job was not held\n" {
		t.Fatalf("release NAME --dsn = %d, %q, %q", code, out, errs)
	}
	if code, out, errs := cli(t, "release", "--log-level", "warn", "job", "--dsn", dsn, "--log-format", "json"); code != 0 || out != "job was not held\n" {
		t.Fatalf("release with flags on both sides of NAME = %d, %q, %q", code, out, errs)
	}
	if code, out, errs := cli(t, "release", "--dsn", dsn, "--", "--job"); code != exitFailure || !strings.Contains(errs, `no flag named "--job"`) {
		t.Fatalf("release -- --job = %d, %q, %q: want the name after -- taken as it is", code, out, errs)
	}
	if code, out, errs := cli(t, "release", "job", "other", "--dsn", dsn); code != exitUsage || !strings.Contains(errs, `one flag name, got ["job" "other"]`) {
		t.Fatalf("release with two names = %d, %q, %q", code, out, errs)
	}
	if code, out, errs := cli(t, "status", "--dsn", dsn, "--json"); code != 0 || !strings.Contains(out, `"name": "job"`) {
		t.Fatalf("status --json = %d, %q, %q", code, out, errs)
	}
	// run: what follows the command is the command's.
	if code, out, errs := cli(t, "run", "--dsn", dsn, "--name", "job", "echo", "--dsn", "x"); code != 0 || out != "--dsn x\n" {
		t.Fatalf("run ... echo --dsn x = %d, %q, %q", code, out, errs)
	}
}

// TestFlagsFromEnvironment: every flag can be set as LEADERSHIP_<FLAG>;
// the command line wins; --help says so.
func TestFlagsFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	dsn := "sqlite:" + filepath.Join(dir, "flags.db")
	marks := filepath.Join(dir, "marks")
	env := []string{"LEADERSHIP_DSN=" + dsn, "LEADERSHIP_NAME=envjob", "LEADERSHIP_PROCESS=env-host", "LEADERSHIP_LEASE=2s", "LEADERSHIP_LOG_FORMAT=json"}
	// The holder named by LEADERSHIP_PROCESS runs with a 2 s lease and logs JSON.
	holder := exec.Command(bin, "run", "--", "sh", "-c", `echo "start $$ $PPID $(date +%s%N)" >> "$MARKS"; sleep 30`)
	holder.Env = append(append(os.Environ(), env...), "MARKS="+marks)
	holderErr := &syncBuffer{} // read below while the process still writes
	holder.Stderr = holderErr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	waitFor(t, 10*time.Second, "the command starts", func() bool { return len(starts(readMarks(t, marks))) == 1 })
	if !strings.HasPrefix(holderErr.String(), "{") {
		t.Fatalf("LEADERSHIP_LOG_FORMAT=json ignored:\n%s", holderErr.String())
	}
	code, out, errs := cliEnv(t, env, "status", "--json")
	if code != 0 || !strings.Contains(out, `"holder": "env-host"`) || !strings.Contains(out, `"name": "envjob"`) {
		t.Fatalf("status = %d %q %q: want envjob held by env-host", code, out, errs)
	}
	// LEADERSHIP_SKIP_IF_HELD=true, and a flag on the command line beats
	// the environment's LEADERSHIP_NAME.
	skip := append(env, "LEADERSHIP_SKIP_IF_HELD=true", "LEADERSHIP_HOLD=0", "LEADERSHIP_PROCESS=")
	if code, _, errs := cliEnv(t, skip, "run", "--", "true"); code != 0 || !strings.Contains(errs, "skipping") {
		t.Fatalf("run with LEADERSHIP_SKIP_IF_HELD=true = %d, %q: want a skip", code, errs)
	}
	if code, out, errs := cliEnv(t, skip, "run", "--name", "other", "--", "echo", "ran"); code != 0 || out != "ran\n" {
		t.Fatalf("run --name other with LEADERSHIP_NAME=envjob = %d, %q, %q: want --name to win", code, out, errs)
	}
	if code, _, errs := cliEnv(t, []string{"LEADERSHIP_LEASE=soon"}, "run", "--name", "x", "--", "true"); code != exitUsage || !strings.Contains(errs, `LEADERSHIP_LEASE="soon"`) {
		t.Fatalf("bad LEADERSHIP_LEASE = %d, %q", code, errs)
	}
	_, _, help := cli(t, "run", "--help")
	for _, want := range []string{"(env LEADERSHIP_LEASE)", "(env LEADERSHIP_SKIP_IF_HELD)", "(env LEADERSHIP_DSN)", "a flag on the command line wins"} {
		if !strings.Contains(help, want) {
			t.Errorf("run --help lacks %q", want)
		}
	}
}

// TestGraceDefaultsFromLease: --lease 1s alone is accepted, the grace
// period being --lease/5 unless given.
func TestGraceDefaultsFromLease(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "flags.db")
	if code, out, errs := cli(t, "run", "--dsn", dsn, "--name", "x", "--lease", "1s", "--", "echo", "ok"); code != 0 || out != "ok\n" {
		t.Fatalf("run --lease 1s = %d %q %q", code, out, errs)
	}
	if code, _, errs := cli(t, "run", "--dsn", dsn, "--name", "x", "--lease", "1s", "--grace", "500ms", "--", "true"); code != exitUsage || !strings.Contains(errs, "--grace 500ms") {
		t.Fatalf("run --lease 1s --grace 500ms = %d %q, want the explicit grace refused", code, errs)
	}
}

// TestMySQLUnixSocketDSN: the CLI reaches MariaDB through a unix socket,
// named as unix(PATH) or socket=PATH. The socket is a relay to the test
// server's TCP port, so the test needs no socket of the server's own.
func TestMySQLUnixSocketDSN(t *testing.T) {
	cfg, err := gomysql.ParseDSN(freshMySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "mysqld.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial(cfg.Net, cfg.Addr)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c) }()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
	user := cfg.User + ":" + cfg.Passwd
	for _, dsn := range []string{
		"mysql://" + user + "@unix(" + sock + ")/" + cfg.DBName,
		"mysql://" + user + "@localhost/" + cfg.DBName + "?socket=" + sock,
	} {
		if code, out, errs := cli(t, "migrate", "--dsn", dsn); code != 0 || !strings.Contains(out, "version") {
			t.Errorf("migrate --dsn %s = %d %q %q", dsn, code, out, errs)
		}
	}
}
