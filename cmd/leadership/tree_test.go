//go:build linux

package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// treeScript returns the command of the process-tree tests (run as
// `sh -c SCRIPT`) and the file where its processes record "PID STARTTIME".
// Below `leadership run` it makes
//
//	sh (this script)                              level 1, the command
//	└─ sh level2                                  level 2
//	   ├─ sh -c '…; exec sleep 60'                level 3, in the foreground
//	   ├─ setsid sh -c '…; exec sleep 60' &       leaves the process group, ignores SIGTERM
//	   └─ sh -c 'sleep 60 &'                      exits at once: its sleep is orphaned
//
// and records the five long-lived pids. Before it records anything, the
// script checks the pids already in the file (an earlier host's tree) and
// appends "alive PID 0 NANOS" to $MARKS for each one still running: the
// check happens at the instant the next host's command starts.
func treeScript(t *testing.T) (script, pidsFile string) {
	t.Helper()
	dir := t.TempDir()
	pidsFile = filepath.Join(dir, "pids")
	rec := filepath.Join(dir, "rec")
	level2 := filepath.Join(dir, "level2")
	// rec PID appends PID and its start time (field 22 of /proc/PID/stat;
	// the commands here have no space in their names).
	write := func(path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(rec, `echo "$1 $(cut -d' ' -f22 /proc/$1/stat)" >> "$PIDS"`+"\n")
	write(level2, `sh "$REC" $$
setsid sh -c 'trap "" TERM; sh "$REC" $$; exec sleep 60' &
sh -c 'sleep 60 & sh "$REC" $!'
sh -c 'sh "$REC" $$; exec sleep 60'
true
`)
	script = fmt.Sprintf(`export PIDS=%q REC=%q
if [ -f "$PIDS" ]; then
	while read -r p st; do
		if [ "$(cut -d' ' -f22 /proc/$p/stat 2>/dev/null)" = "$st" ] && [ "$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null)" != Z ]; then
			echo "alive $p 0 $(date +%%s%%N)" >> "$MARKS"
		fi
	done < "$PIDS"
fi
echo "start $$ $PPID $(date +%%s%%N)" >> "$MARKS"
sh "$REC" $$
sh %q
true`, pidsFile, rec, level2)
	return script, pidsFile
}

// treeProc is a process a tree recorded.
type treeProc struct {
	pid   int
	start string // field 22 of /proc/PID/stat: tells a reused pid apart
}

func readTree(t *testing.T, path string) []treeProc {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var procs []treeProc
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		pid, _ := strconv.Atoi(f[0])
		procs = append(procs, treeProc{pid, f[1]})
	}
	return procs
}

// running reports whether p is still running: the same process (same
// start time) and not a zombie.
func (p treeProc) running() bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return false
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // f[0] is field 3, the state
	return len(f) > 19 && f[19] == p.start && f[0] != "Z"
}

// TestRunStopsTheWholeProcessTree: when leadership ends for a command
// tree three levels deep, with a descendant that left the process group
// (setsid) and ignores SIGTERM and another orphaned by its parent, no
// process of the tree still runs when another host's command starts: after
// an eviction, after the database is lost, after SIGKILL of `leadership
// run`, and after SIGSTOP of `leadership run` alone for longer than the
// lease. If run's watchdog process is killed, or stopped while leadership
// is lost, run itself kills the tree before anyone else can start. Each
// case runs with the tree in a cgroup of its own; on SQLite, also with the
// sweeps of /proc alone (see mechanism).
func TestRunStopsTheWholeProcessTree(t *testing.T) {
	for _, fault := range []string{"evicted", "database-lost", "run-killed", "run-stopped", "watchdog-killed", "watchdog-stopped-and-evicted"} {
		for db, dsnOf := range databases() {
			if fault == "database-lost" && db == "sqlite" {
				continue // a file cannot be taken away from a process that has it open
			}
			if strings.HasPrefix(fault, "watchdog-") && db != "sqlite" {
				continue // run's own fallback does not depend on the database
			}
			for _, mech := range []string{"cgroup", "scan"} {
				if mech == "scan" && db != "sqlite" {
					continue // the database does not change how the tree is killed
				}
				t.Run(fault+"/"+db+"/"+mech, func(t *testing.T) {
					t.Parallel()
					dsn, name := dsnOf(t), uniqueName(t)
					dsnA := dsn
					var cut func()
					if fault == "database-lost" {
						dsnA, cut = proxied(t, dsn)
					}
					testTreeStops(t, fault, mech, dsn, dsnA, name, cut)
				})
			}
		}
	}
}

// testTreeStops runs the tree on host A (through dsnA) and a waiting host
// B (through dsn), both killing trees by mechanism mech, applies fault to
// A, and checks that no process of A's tree runs when B's command starts.
// cut black-holes dsnA.
func testTreeStops(t *testing.T, fault, mech, dsn, dsnA, name string, cut func()) {
	marks := filepath.Join(t.TempDir(), "marks")
	script, pidsFile := treeScript(t)
	w := via(t, mech)
	a := startHost(t, w, dsnA, name, marks, script, "its tree starts", func(*runner) bool { return len(readTree(t, pidsFile)) == 5 })
	checkMechanism(t, a, mech)
	// Registered after the runners, so it runs before their cleanups wait
	// for them (and their stderr, which the tree shares): a tree left
	// behind is killed.
	t.Cleanup(func() {
		for _, p := range readTree(t, pidsFile) {
			if p.running() {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	})
	tree := readTree(t, pidsFile)
	b := startHost(t, w, dsn, name, marks, script, "it waits", func(b *runner) bool { return strings.Contains(b.stderr.String(), "waiting for leadership") })
	if s := starts(readMarks(t, marks)); len(s) != 1 {
		t.Fatalf("%d commands started, want 1: %+v", len(s), s)
	}

	watchdog := 0 // the parent of the command
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", tree[0].pid)); err == nil {
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		watchdog, _ = strconv.Atoi(f[1])
	}
	begin := time.Now()
	switch fault {
	case "watchdog-killed":
		if err := syscall.Kill(watchdog, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	case "watchdog-stopped-and-evicted":
		if err := syscall.Kill(watchdog, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(watchdog, syscall.SIGCONT) })
		if code, out, errs := cli(t, "release", "--dsn", dsn, name); code != 0 {
			t.Fatalf("release = %d, %q, %q", code, out, errs)
		}
	case "evicted":
		if code, out, errs := cli(t, "release", "--dsn", dsn, name); code != 0 {
			t.Fatalf("release = %d, %q, %q", code, out, errs)
		}
	case "database-lost":
		cut()
	case "run-killed":
		if err := a.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
	case "run-stopped":
		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })
	}
	secondStarted := func() bool { return len(starts(readMarks(t, marks))) == 2 }
	if fault == "run-stopped" && strings.HasPrefix(dsn, "sqlite:") && !waitUntil(15*time.Second, secondStarted) {
		// SQLite's write lock belongs to the process that takes it: a
		// stop that lands inside the holder's write (about a millisecond
		// every renew interval) blocks every other process's attempts
		// until the holder resumes or dies, as the sqlite package
		// documents. Safety is unchanged: resume it, and the tree must
		// still be dead before the second host's command starts.
		if !strings.Contains(b.stderr.String(), "database is locked") {
			t.Fatalf("the second host's command did not start within 15s, and not because the stopped host holds SQLite's write lock")
		}
		t.Logf("the stop landed inside the holder's write, which holds SQLite's write lock: resuming it")
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
	}
	waitFor(t, 15*time.Second, "the second host's command starts", secondStarted)
	t.Logf("%s: the second host's command started %v after the fault (lease 2s, grace 300ms)", fault, time.Since(begin).Round(time.Millisecond))
	var alive []string
	for _, m := range readMarks(t, marks) {
		if m.kind == "alive" {
			alive = append(alive, strconv.Itoa(m.pid))
		}
	}
	for _, p := range tree {
		if p.running() {
			alive = append(alive, strconv.Itoa(p.pid)+" (still now)")
		}
	}
	if len(alive) > 0 {
		t.Fatalf("%s: processes of the first host's tree %v were running when the second host's command started: %v", fault, tree, alive)
	}
	if fault != "run-killed" && fault != "run-stopped" {
		if code := a.wait(t, 10*time.Second); code != exitLost {
			t.Fatalf("leadership run exited %d after losing leadership, want %d", code, exitLost)
		}
	}
}

// startHost starts a host running script and waits until ready says it
// is in the state the test needs. On a loaded machine the first attempt
// at the database can exceed its timeout (a fifth of the 2 s lease), and
// then `leadership run` exits 69 at start, as documented: such a host is
// started again, as a service manager would, up to five times.
func startHost(t *testing.T, via []string, dsn, name, marks, script, what string, ready func(*runner) bool) *runner {
	t.Helper()
	for attempt := 1; ; attempt++ {
		r := startRunVia(t, via, dsn, name, marks, script, "--log-level", "debug")
		deadline := time.Now().Add(15 * time.Second)
		for !ready(r) {
			select {
			case <-r.exited:
				if code := r.cmd.ProcessState.ExitCode(); code != exitUnavailable || attempt == 5 {
					t.Fatalf("leadership run exited %d before %s (attempt %d)", code, what, attempt)
				}
				t.Logf("leadership run exited %d at start (attempt %d): starting it again", exitUnavailable, attempt)
			case <-time.After(10 * time.Millisecond):
				if time.Now().After(deadline) {
					t.Fatalf("host: %s: not within 15s", what)
				}
				continue
			}
			break
		}
		if ready(r) {
			return r
		}
	}
}

// proxied returns dsn rewritten to reach its server through a TCP proxy of
// the test's own, and a function that black-holes the proxy: it then keeps
// every connection open and accepts new ones, but passes no byte.
func proxied(t *testing.T, dsn string) (string, func()) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("DSN of the test server: %v", err)
	}
	target := u.Host
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var cut atomic.Bool
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if cut.Load() {
				continue // accepted, never answered
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, s)
			mu.Unlock()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 && !cut.Load() {
						if _, err := dst.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}
			go pipe(s, c)
			go pipe(c, s)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	u.Host = l.Addr().String()
	return u.String(), func() { cut.Store(true) }
}

// TestSignalWhileConnecting: SIGTERM or SIGINT while `leadership run` is
// still connecting (here to servers that accept connections and never
// answer) ends it at once with 128+N and says why, instead of waiting for
// the connection attempt to time out.
func TestSignalWhileConnecting(t *testing.T) {
	for _, tc := range []struct {
		scheme string
		sig    syscall.Signal
	}{{"postgres", syscall.SIGTERM}, {"mysql", syscall.SIGINT}} {
		t.Run(tc.scheme, func(t *testing.T) {
			t.Parallel()
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			accepted := make(chan net.Conn, 8)
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					accepted <- c // held open, never answered
				}
			}()
			t.Cleanup(func() {
				l.Close()
				for {
					select {
					case c := <-accepted:
						c.Close()
					default:
						return
					}
				}
			})
			// A 60 s lease: the first attempt's own timeout (a fifth of
			// the lease) is far away.
			dsn := fmt.Sprintf("%s://u:secret-pw@%s/db", tc.scheme, l.Addr())
			r := startRunScript(t, dsn, uniqueName(t), filepath.Join(t.TempDir(), "marks"), "true", "--lease", "60s")
			var c net.Conn
			select {
			case c = <-accepted:
				accepted <- c
			case <-r.exited:
				t.Fatalf("leadership run exited %d before connecting:\n%s", r.cmd.ProcessState.ExitCode(), r.stderr)
			case <-time.After(30 * time.Second):
				t.Fatal("leadership run did not connect within 30s")
			}
			time.Sleep(100 * time.Millisecond)
			signalled := time.Now()
			if err := r.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			code := r.wait(t, 20*time.Second)
			took := time.Since(signalled)
			t.Logf("%s: exited %d %v after %v", tc.scheme, code, took.Round(time.Millisecond), tc.sig)
			if want := 128 + int(tc.sig); code != want || took > 3*time.Second {
				t.Fatalf("after %v while connecting: exit %d after %v, want %d within 3s; stderr:\n%s", tc.sig, code, took, want, r.stderr)
			}
			if errs := r.stderr.String(); !strings.Contains(errs, unix.SignalName(tc.sig)+" while connecting to the database") || strings.Contains(errs, "secret-pw") {
				t.Fatalf("stderr does not say why, or shows the password:\n%s", errs)
			}
		})
	}
}

// TestLeftoversStoppedWhenTheCommandExits: when the command exits by
// itself, what it left running (here a process in a session of its own
// that ignores SIGTERM) is killed before run exits with the command's
// status and releases the flag; and a signal while run waits to lead ends
// it with 128+N.
func TestLeftoversStoppedWhenTheCommandExits(t *testing.T) {
	dir := t.TempDir()
	dsn, name := "sqlite:"+filepath.Join(dir, "flags.db"), uniqueName(t)
	pidFile := filepath.Join(dir, "leftover")
	code, _, errs := cli(t, "run", "--dsn", dsn, "--name", name, "--lease", "2s", "--grace", "300ms", "--",
		"sh", "-c", `setsid sh -c 'trap "" TERM; echo $$ > "$0"; exec sleep 60' "$0" & while [ ! -s "$0" ]; do sleep 0.01; done; exit 7`, pidFile)
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the leftover did not start (%v); exit %d, stderr:\n%s", err, code, errs)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the command's leftover %d still runs after leadership run exited %d; stderr:\n%s", pid, code, errs)
	}
	if code != 7 {
		t.Fatalf("leadership run exited %d, want the command's 7; stderr:\n%s", code, errs)
	}

	// A second run waits behind a holder; SIGTERM ends the wait with 143.
	startRunScript(t, dsn, name, filepath.Join(dir, "marks"), childScript)
	waitFor(t, 15*time.Second, "the holder's command starts", func() bool { return len(starts(readMarks(t, filepath.Join(dir, "marks")))) == 1 })
	waiter := startRunScript(t, dsn, name, filepath.Join(dir, "marks"), childScript)
	waitFor(t, 15*time.Second, "the second run waits", func() bool { return strings.Contains(waiter.stderr.String(), "waiting for leadership") })
	if err := waiter.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waiter.wait(t, 10*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("SIGTERM while waiting: exit %d, want %d", code, 128+int(syscall.SIGTERM))
	}
}
