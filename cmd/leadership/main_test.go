//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// bin is the leadership binary built once for the end-to-end tests.
var bin string

func TestMain(m *testing.M) {
	if name, arg, ok := strings.Cut(os.Getenv(helperEnv), ":"); ok {
		os.Exit(runHelper(name, arg))
	}
	dir, err := os.MkdirTemp("", "leadership-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "leadership")
	if out, err := exec.Command("go", "build", "-race", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// databases returns the DSNs the end-to-end tests run on: a SQLite file of
// the test's own, and PostgreSQL and MariaDB/MySQL as the store tests find
// them.
func databases() map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "flags.db") },
		"postgres": func(t *testing.T) string { return testdb.Postgres(t) },
		"mysql": func(t *testing.T) string {
			dsn, err := storeopen.MySQLURL(freshMySQL(t))
			if err != nil {
				t.Fatal(err)
			}
			return dsn
		},
	}
}

// freshMySQL creates a database of the test's own on the MySQL server
// testdb finds (the test user may create leadership_*), so that no other
// test's schema version or rows are seen, and returns its DSN.
func freshMySQL(t *testing.T) string {
	t.Helper()
	return testdb.FreshMySQL(t).FormatDSN()
}

// uniqueName gives a flag name no other test run uses on a shared server.
func uniqueName(t *testing.T) string {
	return fmt.Sprintf("cli-%s-%d", strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()), time.Now().UnixNano())
}

// cli runs the binary to completion and returns its exit code, stdout and
// stderr.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return cliIn(t, "", "", args...)
}

// cliIn is cli in the directory dir (the test's own if ""), with
// LEADERSHIP_DSN set to envDSN.
func cliIn(t *testing.T, dir, envDSN string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = &out, &errb, dir
	cmd.Env = append(os.Environ(), "LEADERSHIP_DSN="+envDSN)
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// childScript is a leader-only command that appends "start PID RUN NANOS"
// to the marks file, and "stop PID RUN NANOS" when it gets SIGTERM, where
// RUN is the pid of its `leadership run` (its grandparent: its parent is
// run's watchdog process).
const childScript = `RUN=$(cut -d' ' -f4 /proc/$PPID/stat)
echo "start $$ $RUN $(date +%s%N)" >> "$MARKS"
trap 'echo "stop $$ $RUN $(date +%s%N)" >> "$MARKS"; exit 0' TERM
while :; do sleep 0.02; done`

type mark struct {
	kind      string
	pid, ppid int // ppid: the pid of leadership run in childScript's marks
	at        time.Time
}

func readMarks(t *testing.T, path string) []mark {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var marks []mark
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		pid, _ := strconv.Atoi(f[1])
		ppid, _ := strconv.Atoi(f[2])
		ns, _ := strconv.ParseInt(f[3], 10, 64)
		marks = append(marks, mark{f[0], pid, ppid, time.Unix(0, ns)})
	}
	return marks
}

func starts(marks []mark) []mark {
	var s []mark
	for _, m := range marks {
		if m.kind == "start" {
			s = append(s, m)
		}
	}
	return s
}

// waitFor polls cond until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !waitUntil(limit, cond) {
		t.Fatalf("%s: not within %v", what, limit)
	}
}

// waitUntil polls cond every 10 ms and reports whether it held within limit.
func waitUntil(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// runner is one `leadership run` process.
type runner struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{}
}

// startRun starts `leadership run` of childScript with a 2 s lease and a
// 300 ms grace period, plus the extra flags.
func startRun(t *testing.T, dsn, name, marks string, extra ...string) *runner {
	t.Helper()
	return startRunScript(t, dsn, name, marks, childScript, extra...)
}

// startRunScript is startRun with another shell script as the command.
func startRunScript(t *testing.T, dsn, name, marks, script string, extra ...string) *runner {
	t.Helper()
	return startRunVia(t, nil, dsn, name, marks, script, extra...)
}

// startRunVia is startRunScript with leadership run started through the
// command via (for example unshare), which must exec it.
func startRunVia(t *testing.T, via []string, dsn, name, marks, script string, extra ...string) *runner {
	t.Helper()
	args := append([]string{"run", "--dsn", dsn, "--name", name, "--lease", "2s", "--grace", "300ms"}, extra...)
	args = append(append(append(via, bin), args...), "--", "sh", "-c", script)
	r := &runner{cmd: exec.Command(args[0], args[1:]...), stderr: &syncBuffer{}, exited: make(chan struct{})}
	r.cmd.Env = append(os.Environ(), "MARKS="+marks)
	r.cmd.Stderr = r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.exited
		if t.Failed() {
			t.Logf("leadership run %d stderr:\n%s", r.cmd.Process.Pid, r.stderr)
		}
	})
	return r
}

// syncBuffer is a bytes.Buffer that a test may read while the process
// writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (r *runner) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-r.exited:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		t.Fatalf("leadership run %d did not exit within %v", r.cmd.Process.Pid, limit)
		return -1
	}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// TestRunEndToEnd runs leadership run processes as a user would, on each
// database: one command runs; SIGKILL of its leader starts it elsewhere
// within about a lease; SIGTERM stops it and hands over; eviction stops it
// before any other starts.
func TestRunEndToEnd(t *testing.T) {
	for db, dsnOf := range databases() {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			dsn, name := dsnOf(t), uniqueName(t)
			marks := filepath.Join(t.TempDir(), "marks")
			runners := map[int]*runner{}
			// A host whose first attempt fails on a loaded machine exits
			// 69 at start (seen once: a 400 ms timeout), and would leave
			// none waiting for the eviction below: startHost starts it
			// again.
			start := func() *runner {
				r := startHost(t, nil, dsn, name, marks, childScript, "it leads or waits", func(r *runner) bool {
					s := r.stderr.String()
					return strings.Contains(s, "leading; command started") || strings.Contains(s, "waiting for leadership")
				})
				runners[r.cmd.Process.Pid] = r
				return r
			}
			for range 3 {
				start()
			}
			waitFor(t, 10*time.Second, "a command starts", func() bool { return len(starts(readMarks(t, marks))) == 1 })
			time.Sleep(2500 * time.Millisecond) // more than a lease: nobody else may start
			if s := starts(readMarks(t, marks)); len(s) != 1 {
				t.Fatalf("%d commands started, want exactly 1: %+v", len(s), s)
			}

			// SIGKILL of the leader: its command dies with it, another starts.
			first := starts(readMarks(t, marks))[0]
			killed := time.Now()
			if err := runners[first.ppid].cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "a command starts after SIGKILL of the leader", func() bool { return len(starts(readMarks(t, marks))) == 2 })
			second := starts(readMarks(t, marks))[1]
			t.Logf("%s: failover after SIGKILL took %v (lease 2s)", db, second.at.Sub(killed).Round(time.Millisecond))
			waitFor(t, 5*time.Second, "the killed leader's command dies with it", func() bool { return !alive(first.pid) })

			// A fourth process waits too, so that one is left waiting for
			// the eviction below.
			start()

			// SIGTERM of the leader: forwarded to its command, which stops;
			// the flag is released and another command starts promptly.
			stopped := time.Now()
			if err := runners[second.ppid].cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := runners[second.ppid].wait(t, 15*time.Second); code != 0 {
				t.Fatalf("leadership run exited %d after SIGTERM, want the command's status 0", code)
			}
			waitFor(t, 10*time.Second, "a command starts after SIGTERM of the leader", func() bool { return len(starts(readMarks(t, marks))) == 3 })
			third := starts(readMarks(t, marks))[2]
			t.Logf("%s: handover after SIGTERM took %v", db, third.at.Sub(stopped).Round(time.Millisecond))

			// Eviction: the evicted leader stops its command (exit 75)
			// before the fourth process starts its own.
			if code, out, errs := cli(t, "release", "--dsn", dsn, name); code != 0 || !strings.Contains(out, "evicted") {
				t.Fatalf("release = %d, %q, %q", code, out, errs)
			}
			// The eviction committed before `leadership release` exited;
			// counting from its exit leaves out the start of a race-built
			// binary (seconds on a loaded machine), which is not the
			// takeover's.
			released := time.Now()
			if code := runners[third.ppid].wait(t, 15*time.Second); code != exitLost {
				t.Fatalf("evicted leadership run exited %d, want %d", code, exitLost)
			}
			waitFor(t, 10*time.Second, "a command starts after the eviction", func() bool { return len(starts(readMarks(t, marks))) == 4 })
			var stopAt time.Time
			for _, m := range readMarks(t, marks) {
				if m.kind == "stop" && m.pid == third.pid {
					stopAt = m.at
				}
			}
			startAt := starts(readMarks(t, marks))[3].at
			if stopAt.IsZero() || !stopAt.Before(startAt) {
				t.Fatalf("evicted command stopped at %v, next started at %v: want the stop first", stopAt, startAt)
			}
			t.Logf("%s: after eviction the old command stopped %v before the new one started", db, startAt.Sub(stopAt).Round(time.Millisecond))
			// The README promises the takeover within one lease (2 s) plus
			// jitter; twice the lease leaves room for a loaded machine.
			if took := startAt.Sub(released); took > 4*time.Second {
				t.Fatalf("the next command started %v after release exited, want within about one lease (2s)", took)
			}
		})
	}
}

func TestSkipIfHeldAndWait(t *testing.T) {
	dsn, name := "sqlite:"+filepath.Join(t.TempDir(), "flags.db"), uniqueName(t)
	marks := filepath.Join(t.TempDir(), "marks")
	startRun(t, dsn, name, marks)
	waitFor(t, 10*time.Second, "the holder's command starts", func() bool { return len(starts(readMarks(t, marks))) == 1 })

	begin := time.Now()
	skip := startRun(t, dsn, name, marks, "--skip-if-held")
	if code := skip.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("--skip-if-held exited %d, want 0", code)
	}
	t.Logf("--skip-if-held exited after %v", time.Since(begin).Round(time.Millisecond))

	wait := startRun(t, dsn, name, marks, "--wait", "500ms")
	if code := wait.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("--wait 500ms exited %d, want 0", code)
	}
	if n := len(starts(readMarks(t, marks))); n != 1 {
		t.Fatalf("%d commands started, want only the holder's", n)
	}
}

func TestChildStatusPassesThrough(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "flags.db")
	if code, _, errs := cli(t, "run", "--dsn", dsn, "--name", "exit7", "--", "sh", "-c", "exit 7"); code != 7 {
		t.Fatalf("exit code %d, want 7; stderr:\n%s", code, errs)
	}
	if code, _, _ := cli(t, "run", "--dsn", dsn, "--name", "missing", "--", "/no/such/command"); code != 127 {
		t.Fatalf("missing command: exit code %d, want 127", code)
	}
	notExecutable := filepath.Join(t.TempDir(), "job")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := cli(t, "run", "--dsn", dsn, "--name", "missing", "--", notExecutable); code != 126 {
		t.Fatalf("command that cannot be executed: exit code %d, want 126", code)
	}
	// The command gets the fencing token, and the flag was released: the
	// next run gets a larger token at once, not after the 15 s lease.
	begin := time.Now()
	code, out, _ := cli(t, "run", "--dsn", dsn, "--name", "exit7", "--", "sh", "-c", `echo "$LEADERSHIP_NAME $LEADERSHIP_TOKEN"`)
	if code != 0 || strings.TrimSpace(out) != "exit7 2" {
		t.Fatalf("got %d %q, want 0 and \"exit7 2\"", code, out)
	}
	if took := time.Since(begin); took > leadership.DefaultLease/2 {
		t.Fatalf("the next run took %v: the flag was not released when the command exited", took)
	}
}

func TestStatus(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flags.db")
	s := testdb.SQLite(t, path)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, leadership.Request{Name: "held", Holder: "host-a", Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Acquire(ctx, leadership.Request{Name: "free", Holder: "host-b", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, "free", "host-b", r.Version); err != nil {
		t.Fatal(err)
	}

	code, out, errs := cli(t, "status", "--dsn", "sqlite:"+path)
	if code != 0 {
		t.Fatalf("status = %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME ") ||
		strings.Join(strings.Fields(lines[1])[:3], " ") != "free - 1" ||
		strings.Join(strings.Fields(lines[2])[:3], " ") != "held host-a 1" || !strings.Contains(lines[2], "in 3") {
		t.Fatalf("status table:\n%s", out)
	}

	code, out, _ = cli(t, "status", "--dsn", "sqlite:"+path, "--json")
	var got struct{ Flags []statusFlag }
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.Flags) != 2 {
		t.Fatalf("status --json = %d:\n%s", code, out)
	}
	if f := got.Flags[1]; f.Name != "held" || f.Holder != "host-a" || !f.Held || f.Version != 1 || f.ExpiresIn < 3590 || f.ExpiresIn > 3600 {
		t.Fatalf("held flag in JSON: %+v", f)
	}
	if f := got.Flags[0]; f.Name != "free" || f.Held || f.Version != 1 {
		t.Fatalf("free flag in JSON: %+v", f)
	}

	if code, _, errs := cli(t, "release", "--dsn", "sqlite:"+path, "nope"); code != exitFailure || !strings.Contains(errs, "no flag named") {
		t.Fatalf("release of an unknown flag = %d, %q", code, errs)
	}
}

func TestBadUsage(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "flags.db")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, exitUsage, "Usage"},
		{[]string{"frobnicate"}, exitUsage, "unknown command"},
		{[]string{"run", "--dsn", dsn, "--name", "x"}, exitUsage, "no command"},
		{[]string{"run", "--dsn", dsn, "--", "true"}, exitUsage, "--name is mandatory"},
		{[]string{"run", "--dsn", dsn, "--name", "x", "--lease", "1s", "--grace", "1s", "--", "true"}, exitUsage, "--grace"},
		{[]string{"run", "--dsn", dsn, "--name", "x", "--lease", "soon", "--", "true"}, exitUsage, "invalid value"},
		{[]string{"status", "--dsn", "oracle://u:secret-pw@h/db"}, exitUsage, `scheme "oracle"`},
		{[]string{"status", "--dsn", dsn, "--log-level", "loud"}, exitUsage, "--log-level"},
		{[]string{"release", "--dsn", dsn}, exitUsage, "one flag name"},
		{[]string{"run", "--dsn", "postgres://u:secret-pw@127.0.0.1:1/db?connect_timeout=2", "--name", "x", "--", "true"}, exitUnavailable, "connect"},
		{[]string{"run", "--dsn", "mysql://u:secret-pw@127.0.0.1:1/db?timeout=2s", "--name", "x", "--", "true"}, exitUnavailable, "connect"},
		{[]string{"status", "--dsn", "postgres://u:secret-pw@127.0.0.1:1/db?connect_timeout=2"}, exitUnavailable, "connect"},
		{[]string{"migrate", "--dsn", "mysql://u:secret-pw@127.0.0.1:1/db?timeout=2s"}, exitUnavailable, "connect"},
	} {
		code, out, errs := cli(t, tc.args...)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Errorf("leadership %q = %d, output:\n%s%s\nwant %d and %q", tc.args, code, out, errs, tc.code, tc.want)
		}
		if strings.Contains(out+errs, "secret-pw") {
			t.Errorf("leadership %q shows the password:\n%s", tc.args, errs)
		}
	}
	for _, cmd := range []string{"run", "status", "release", "migrate"} {
		if code, _, errs := cli(t, cmd, "--help"); code != 0 || !strings.Contains(errs, "Examples:") {
			t.Errorf("%s --help = %d:\n%s", cmd, code, errs)
		}
	}
	// The defaults the README gives: --lease 15 s, --grace lease/5 (3 s).
	_, _, errs := cli(t, "run", "--help")
	for _, want := range []string{"-lease duration", "(default 15s)", "-grace duration", "(default --lease/5: 3s at the default lease)"} {
		if !strings.Contains(errs, want) {
			t.Errorf("run --help lacks %q:\n%s", want, errs)
		}
	}
	if code, out, _ := cli(t, "--version"); code != 0 || !strings.HasPrefix(out, "leadership ") {
		t.Errorf("--version = %d %q", code, out)
	}
}

func TestMigrate(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "flags.db")
	if code, out, errs := cli(t, "migrate", "--dsn", dsn); code != 0 || !strings.Contains(out, "version 2") {
		t.Fatalf("migrate = %d %q %q", code, out, errs)
	}
	// The flag package takes -flag as well as --flag.
	if code, out, errs := cli(t, "migrate", "-dsn", dsn); code != 0 || !strings.Contains(out, "version 2") {
		t.Fatalf("migrate -dsn = %d %q %q", code, out, errs)
	}
}

// TestDSNFromEnvironment: without --dsn, LEADERSHIP_DSN names the
// database, else sqlite:leadership.db in the current directory.
func TestDSNFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	if code, out, errs := cliIn(t, dir, "sqlite:"+filepath.Join(dir, "env.db"), "migrate"); code != 0 || !strings.Contains(out, "version 2") {
		t.Fatalf("migrate with LEADERSHIP_DSN = %d %q %q", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "env.db")); err != nil {
		t.Fatalf("LEADERSHIP_DSN was not used: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "leadership.db")); !os.IsNotExist(err) {
		t.Fatalf("leadership.db was created although LEADERSHIP_DSN was set (%v)", err)
	}
	if code, out, errs := cliIn(t, dir, "", "migrate"); code != 0 || !strings.Contains(out, "version 2") {
		t.Fatalf("migrate without a DSN = %d %q %q", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "leadership.db")); err != nil {
		t.Fatalf("the default DSN did not create leadership.db in the current directory: %v", err)
	}
}

// TestRestartAndMetrics: with --restart, an evicted leader stops its
// command, waits, leads again and restarts it; --metrics-addr serves the
// flag's state.
func TestRestartAndMetrics(t *testing.T) {
	dsn, name := "sqlite:"+filepath.Join(t.TempDir(), "flags.db"), uniqueName(t)
	marks := filepath.Join(t.TempDir(), "marks")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r := startRun(t, dsn, name, marks, "--restart", "--metrics-addr", addr)
	waitFor(t, 10*time.Second, "the command starts", func() bool { return len(starts(readMarks(t, marks))) == 1 })

	var body string
	waitFor(t, 10*time.Second, "/metrics shows the raised flag", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return regexp.MustCompile(`(?m)^leadership_flag_state\{name="` + regexp.QuoteMeta(name) + `",process="[^"]*"\} 1$`).MatchString(body)
	})

	if code, out, errs := cli(t, "release", "--dsn", dsn, name); code != 0 {
		t.Fatalf("release = %d, %q, %q", code, out, errs)
	}
	waitFor(t, 15*time.Second, "the command restarts after the eviction", func() bool { return len(starts(readMarks(t, marks))) == 2 })
	s := starts(readMarks(t, marks))
	if s[0].ppid != r.cmd.Process.Pid || s[1].ppid != r.cmd.Process.Pid || s[0].pid == s[1].pid {
		t.Fatalf("starts %+v: want two commands, both of run %d", s, r.cmd.Process.Pid)
	}
	select {
	case <-r.exited:
		t.Fatalf("leadership run --restart exited %d after the eviction", r.cmd.ProcessState.ExitCode())
	default:
	}
}

// TestGraceThenKill: a command that ignores SIGTERM is killed --grace
// after leadership is lost, and dies before another process starts its
// own.
func TestGraceThenKill(t *testing.T) {
	dsn, name := "sqlite:"+filepath.Join(t.TempDir(), "flags.db"), uniqueName(t)
	marks := filepath.Join(t.TempDir(), "marks")
	const stubborn = `echo "start $$ $PPID $(date +%s%N)" >> "$MARKS"
trap '' TERM
while :; do sleep 0.02; done`
	leader := startRunScript(t, dsn, name, marks, stubborn)
	waitFor(t, 10*time.Second, "the command starts", func() bool { return len(starts(readMarks(t, marks))) == 1 })
	first := starts(readMarks(t, marks))[0]
	startRunScript(t, dsn, name, marks, stubborn)

	if code, out, errs := cli(t, "release", "--dsn", dsn, name); code != 0 {
		t.Fatalf("release = %d, %q, %q", code, out, errs)
	}
	var deadAt time.Time
	waitFor(t, 10*time.Second, "the command that ignores SIGTERM is killed", func() bool {
		if alive(first.pid) {
			return false
		}
		deadAt = time.Now()
		return true
	})
	if code := leader.wait(t, 5*time.Second); code != exitLost {
		t.Fatalf("evicted leadership run exited %d, want %d", code, exitLost)
	}
	waitFor(t, 10*time.Second, "the other process starts its command", func() bool { return len(starts(readMarks(t, marks))) == 2 })
	if next := starts(readMarks(t, marks))[1]; !deadAt.Before(next.at) {
		t.Fatalf("the killed command was seen dead at %v, the next one started at %v: want the death first", deadAt, next.at)
	}
}

// TestSignalsForwarded: SIGHUP and SIGINT sent to leadership run reach the
// command, whose exit status then passes through.
func TestSignalsForwarded(t *testing.T) {
	dsn, name := "sqlite:"+filepath.Join(t.TempDir(), "flags.db"), uniqueName(t)
	marks := filepath.Join(t.TempDir(), "marks")
	r := startRunScript(t, dsn, name, marks, `echo "start $$ $PPID $(date +%s%N)" >> "$MARKS"
trap 'echo "hup $$ $PPID $(date +%s%N)" >> "$MARKS"' HUP
trap 'echo "int $$ $PPID $(date +%s%N)" >> "$MARKS"; exit 3' INT
while :; do sleep 0.02; done`)
	waitFor(t, 10*time.Second, "the command starts", func() bool { return len(starts(readMarks(t, marks))) == 1 })
	got := func(kind string) bool {
		for _, m := range readMarks(t, marks) {
			if m.kind == kind {
				return true
			}
		}
		return false
	}
	if err := r.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the command gets SIGHUP", func() bool { return got("hup") })
	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t, 10*time.Second); code != 3 || !got("int") {
		t.Fatalf("after SIGINT leadership run exited %d (int mark: %v), want the command's status 3", code, got("int"))
	}
}

// TestProcessNameAndRelease: --process is the holder status shows and
// release names; releasing a flag nobody holds says so.
func TestProcessNameAndRelease(t *testing.T) {
	dsn, name := "sqlite:"+filepath.Join(t.TempDir(), "flags.db"), uniqueName(t)
	marks := filepath.Join(t.TempDir(), "marks")
	r := startRun(t, dsn, name, marks, "--process", "host-x")
	waitFor(t, 10*time.Second, "the command starts", func() bool { return len(starts(readMarks(t, marks))) == 1 })

	code, out, errs := cli(t, "status", "--dsn", dsn, "--json")
	var got struct{ Flags []statusFlag }
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("status --json = %d %q %q", code, out, errs)
	}
	if len(got.Flags) != 1 || got.Flags[0].Holder != "host-x" || !got.Flags[0].Held {
		t.Fatalf("status --json flags %+v, want %s held by host-x", got.Flags, name)
	}

	if code, out, errs := cli(t, "release", "--dsn", dsn, name); code != 0 || !strings.HasPrefix(out, "evicted host-x from "+name+" (version 1)") {
		t.Fatalf("release = %d, %q, %q", code, out, errs)
	}
	if code := r.wait(t, 10*time.Second); code != exitLost {
		t.Fatalf("evicted leadership run exited %d, want %d", code, exitLost)
	}
	if code, out, errs := cli(t, "release", "--dsn", dsn, name); code != 0 || out != name+" was not held\n" {
		t.Fatalf("second release = %d, %q, %q", code, out, errs)
	}
}
