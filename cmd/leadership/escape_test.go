//go:build linux

package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// The tests here run each tree under both ways run kills it (see
// mechanism), and against processes that a scan of /proc finds hard to
// kill: one whose main thread has exited while another thread runs
// (testdata/zombieleader.c), and fork relays (testdata/relay.c).

// unavailable skips t, or fails it when LEADERSHIP_TEST_REQUIRE_DB=1 (CI,
// which runs as root and has gcc and unshare).
func unavailable(t *testing.T, why string) {
	t.Helper()
	if testdb.Required() {
		t.Fatalf("%s; %s=1 requires it", why, testdb.EnvRequire)
	}
	t.Skip(why)
}

// helperPrograms compiles the C programs of testdata once, next to the
// binary under test.
var helperPrograms = sync.OnceValues(func() (string, error) {
	dir := filepath.Dir(bin)
	for _, name := range []string{"zombieleader", "relay", "idle"} {
		out, err := exec.Command("gcc", "-O", "-pthread", "-o", filepath.Join(dir, name), filepath.Join("testdata", name+".c")).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("gcc %s.c: %v\n%s", name, err, out)
		}
	}
	return dir, nil
})

func helperProgram(t *testing.T, name string) string {
	t.Helper()
	dir, err := helperPrograms()
	if err != nil {
		unavailable(t, err.Error())
	}
	return filepath.Join(dir, name)
}

// mechanisms are the ways run kills a tree, as the test variants name
// them, with the line run logs at start for each.
var mechanisms = map[string]string{
	"cgroup": "killed with cgroup.kill",
	"scan":   "found by sweeps of /proc",
}

// via returns the command that starts leadership run so that it uses the
// mechanism mech: as it is for "cgroup" (root, or a delegated cgroup v2);
// for "scan", in a mount namespace where the cgroup v2 hierarchy is
// hidden under an empty tmpfs (root), unless run cannot create a cgroup
// anyway.
func via(t *testing.T, mech string) []string {
	t.Helper()
	_, err := cgroupParent()
	switch {
	case mech == "cgroup" && err != nil:
		unavailable(t, "this test process cannot create a cgroup v2 for run to kill the tree through (run as root): "+err.Error())
	case mech == "scan" && err == nil && os.Geteuid() != 0:
		unavailable(t, "the cgroup v2 hierarchy can be hidden from run only as root (unshare --mount)")
	case mech == "scan" && err == nil:
		return []string{"unshare", "--mount", "sh", "-c", `mount -t tmpfs none /sys/fs/cgroup && exec "$@"`, "sh"}
	}
	return nil
}

// checkMechanism fails t unless run logged that it uses mech.
func checkMechanism(t *testing.T, r *runner, mech string) {
	t.Helper()
	if !strings.Contains(r.stderr.String(), mechanisms[mech]) {
		t.Fatalf("leadership run did not log %q (mechanism %s); stderr:\n%s", mechanisms[mech], mech, r.stderr)
	}
}

// beat is one line a helper program wrote: its pid and CLOCK_REALTIME.
type beat struct {
	pid int
	at  time.Time
}

func readBeats(t *testing.T, path string) []beat {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var beats []beat
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		pid, _ := strconv.Atoi(f[0])
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		beats = append(beats, beat{pid, time.Unix(0, ns)})
	}
	return beats
}

// state is field 3 of /proc/PID/stat ("" once the pid is gone).
func state(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(data)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

// escapeHosts starts host A, which runs script once the file $GO exists,
// and host B, which waits for the same flag, both through via(t, mech);
// then it creates $GO. Script's processes write beats to the file $BEATS.
func escapeHosts(t *testing.T, mech, script string) (a, b *runner, dsn, name, marks, beats string) {
	t.Helper()
	dir := t.TempDir()
	dsn, name = "sqlite:"+filepath.Join(dir, "flags.db"), uniqueName(t)
	marks, beats = filepath.Join(dir, "marks"), filepath.Join(dir, "beats")
	goFile := filepath.Join(dir, "go")
	w := via(t, mech)
	a = startHost(t, w, dsn, name, marks, fmt.Sprintf(`echo "start $$ $PPID $(date +%%s%%N)" >> "$MARKS"
while [ ! -e %q ]; do sleep 0.01; done
export BEATS=%q
%s`, goFile, beats, script), "its command starts", func(*runner) bool { return len(starts(readMarks(t, marks))) == 1 })
	checkMechanism(t, a, mech)
	b = startHost(t, w, dsn, name, marks, childScript, "it waits", func(b *runner) bool { return strings.Contains(b.stderr.String(), "waiting for leadership") })
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return a, b, dsn, name, marks, beats
}

// TestAProcessWhoseMainThreadExitedDiesWithTheTree: a process whose main
// thread has exited (SYS_exit) while another thread runs is a zombie to
// /proc/PID/stat. Started by the command (which exits a second later), in
// its process group or in a session of its own, and ignoring SIGTERM, it
// is dead when the next host's command starts: after SIGKILL of
// leadership run and after an eviction, with either mechanism.
func TestAProcessWhoseMainThreadExitedDiesWithTheTree(t *testing.T) {
	prog := helperProgram(t, "zombieleader")
	for _, mech := range []string{"cgroup", "scan"} {
		for _, shape := range []string{"", "setsid"} {
			for _, fault := range []string{"run-killed", "evicted"} {
				t.Run(strings.Join([]string{mech, cmp.Or(shape, "same-group"), fault}, "/"), func(t *testing.T) {
					t.Parallel()
					a, _, dsn, name, marks, beats := escapeHosts(t, mech, fmt.Sprintf(`%s %q "$BEATS" & sleep 1; exit 0`, shape, prog))
					pid := 0
					waitFor(t, 10*time.Second, "the helper's main thread exits", func() bool {
						if bs := readBeats(t, beats); len(bs) > 0 {
							pid = bs[0].pid
						}
						return pid != 0 && state(pid) == "Z"
					})
					t.Cleanup(func() {
						if p, err := readStat(pid); err == nil && p.alive {
							_ = syscall.Kill(pid, syscall.SIGKILL)
						}
					})
					faulted := time.Now()
					switch fault {
					case "run-killed":
						if err := a.cmd.Process.Kill(); err != nil {
							t.Fatal(err)
						}
					case "evicted":
						if code, out, errs := cli(t, "release", "--dsn", dsn, name); code != 0 {
							t.Fatalf("release = %d, %q, %q", code, out, errs)
						}
					}
					waitFor(t, 15*time.Second, "host B's command starts", func() bool { return len(starts(readMarks(t, marks))) == 2 })
					started := starts(readMarks(t, marks))[1].at
					last := readBeats(t, beats)
					t.Logf("host B started %v after the fault; the helper's last beat %v after the fault",
						started.Sub(faulted).Round(time.Millisecond), last[len(last)-1].at.Sub(faulted).Round(time.Millisecond))
					if p, err := readStat(pid); err == nil && p.alive {
						t.Fatalf("the helper %d (state Z, a thread running) still runs after host B's command started", pid)
					}
					if at := last[len(last)-1].at; at.After(started) {
						t.Fatalf("the helper %d ran until %v after host B's command started", pid, at.Sub(started))
					}
					if fault == "evicted" {
						// 75, or the command's 0 if it exited first (1
						// if the watchdog reported itself late).
						t.Logf("the evicted leadership run exited %d", a.wait(t, 10*time.Second))
					}
				})
			}
		}
	}
}

// TestAForkRelayDiesWithTheTree: four fork relays (each process forks the
// next and exits at once, thousands of times a second) in sessions of
// their own that ignore SIGTERM, on a host with a thousand other
// processes, are dead when the next host's command starts after SIGKILL
// of leadership run, with either mechanism. The subtests run one at a
// time: the relays take every core.
func TestAForkRelayDiesWithTheTree(t *testing.T) {
	prog := helperProgram(t, "relay")
	idle := exec.Command(helperProgram(t, "idle"), "1000")
	out, err := idle.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idle.Process.Kill(); _ = idle.Wait() })
	if _, err := out.Read(make([]byte, 1)); err != nil {
		t.Fatalf("idle 1000: %v", err)
	}
	for _, mech := range []string{"cgroup", "scan"} {
		t.Run(mech, func(t *testing.T) {
			a, _, _, _, marks, beats := escapeHosts(t, mech, fmt.Sprintf(`for i in 1 2 3 4; do %q "$BEATS" 10 & done; exec sleep 60`, prog))
			waitFor(t, 10*time.Second, "the relays run", func() bool { return len(readBeats(t, beats)) > 0 })
			time.Sleep(200 * time.Millisecond)
			killed := time.Now()
			if err := a.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 15*time.Second, "host B's command starts", func() bool { return len(starts(readMarks(t, marks))) == 2 })
			started := starts(readMarks(t, marks))[1].at
			last := readBeats(t, beats)[0]
			t.Logf("%s: host B started %v after SIGKILL of run; the relays' last beat %v after it",
				mech, started.Sub(killed).Round(time.Millisecond), last.at.Sub(killed).Round(time.Millisecond))
			if last.at.After(started) {
				t.Fatalf("the relays ran until %v after host B's command started", last.at.Sub(started))
			}
			time.Sleep(100 * time.Millisecond)
			if now := readBeats(t, beats)[0]; now != last {
				t.Fatalf("the relays still run after host B's command started (last beat %v after it)", now.at.Sub(started))
			}
		})
	}
}

// TestRunRefusesAProcOfAnotherPIDNamespace: in a PID namespace of its own
// whose /proc is still the parent namespace's (unshare --pid --fork
// without --mount-proc), run refuses to start, naming the fix; with a
// /proc of its own (--mount-proc) it runs the command.
func TestRunRefusesAProcOfAnotherPIDNamespace(t *testing.T) {
	t.Parallel()
	ns := []string{"unshare", "--pid", "--fork"}
	if os.Geteuid() != 0 {
		ns = append(ns, "--user", "--map-root-user")
	}
	if out, err := exec.Command(ns[0], append(ns[1:], "true")...).CombinedOutput(); err != nil {
		unavailable(t, fmt.Sprintf("%v: %v %s", ns, err, out))
	}
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "flags.db")
	runIn := func(ns ...string) (int, string) {
		cmd := exec.Command(ns[0], append(ns[1:], bin, "run", "--dsn", dsn, "--name", "ns", "--", "echo", "ran")...)
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	code, out := runIn(ns...)
	if code != exitFailure || strings.Contains(out, "ran") || !strings.Contains(out, "/proc belongs to another PID namespace") ||
		!strings.Contains(out, "mount a /proc for this namespace") {
		t.Fatalf("run in a PID namespace without its /proc: exit %d, output:\n%s\nwant %d, no command, and the fix named", code, out, exitFailure)
	}
	t.Logf("refused: %s", strings.TrimSpace(out))
	if code, out := runIn(append(ns, "--mount-proc")...); code != 0 || !strings.Contains(out, "ran\n") {
		t.Fatalf("run in a PID namespace with its own /proc: exit %d, output:\n%s\nwant 0 and the command's line", code, out)
	}
}

// TestALateWatchdogIsReported: when the watchdog acts later than half
// the safety margin (a twentieth of the lease) after one of its
// deadlines, it logs an error and run exits non-zero. "deadline": run and its watchdog
// are both stopped (SIGSTOP, as a starved machine would) past the end of
// the trust window, then resumed; the watchdog kills the tree and says
// so, and run exits 75 as for any lost term. "leftover": the watchdog is
// stopped while it waits --grace to kill what the command left running,
// and resumed later than --grace plus half the margin: run exits 1, not the
// command's 0.
func TestALateWatchdogIsReported(t *testing.T) {
	const want = "the watchdog was later than half the safety margin"
	for _, tc := range []struct {
		name, script string
		want         int
		flags        []string
	}{
		{"deadline", `echo "start $$ $PPID $(date +%s%N)" >> "$MARKS"; exec sleep 60`, exitLost, []string{"--grace", "700ms"}},
		// A grace long enough for the test to stop the watchdog within it
		// on a loaded machine; half the margin is lease/20, 0.5 s.
		{"leftover", `echo "start $$ $PPID $(date +%s%N)" >> "$MARKS"; setsid sh -c 'trap "" TERM; exec sleep 60' & sleep 0.5; exit 0`, exitFailure,
			[]string{"--lease", "10s", "--grace", "3s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn, name := "sqlite:"+filepath.Join(t.TempDir(), "flags.db"), uniqueName(t)
			marks := filepath.Join(t.TempDir(), "marks")
			r := startRunScript(t, dsn, name, marks, tc.script, tc.flags...)
			waitFor(t, 15*time.Second, "the command starts", func() bool { return len(starts(readMarks(t, marks))) == 1 })
			command, watchdog := starts(readMarks(t, marks))[0].pid, starts(readMarks(t, marks))[0].ppid
			t.Cleanup(func() { _ = syscall.Kill(watchdog, syscall.SIGCONT); _ = r.cmd.Process.Signal(syscall.SIGCONT) })
			switch tc.name {
			case "deadline":
				if err := syscall.Kill(watchdog, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2500 * time.Millisecond) // more than the lease: the trust window has ended
				_ = syscall.Kill(watchdog, syscall.SIGCONT)
				_ = r.cmd.Process.Signal(syscall.SIGCONT)
			case "leftover":
				waitFor(t, 10*time.Second, "the command exits", func() bool { return state(command) == "" })
				if err := syscall.Kill(watchdog, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				time.Sleep(4500 * time.Millisecond) // more than --grace plus half the margin (3 s + 0.5 s)
				_ = syscall.Kill(watchdog, syscall.SIGCONT)
			}
			code := r.wait(t, 15*time.Second)
			if errs := r.stderr.String(); code != tc.want || !strings.Contains(errs, want) {
				t.Fatalf("leadership run exited %d, want %d, and an error %q; stderr:\n%s", code, tc.want, want, errs)
			}
			for line := range strings.SplitSeq(r.stderr.String(), "\n") {
				if strings.Contains(line, want) {
					t.Logf("%s", line)
				}
			}
		})
	}
}

// TestASetuidProgramGainsNoPrivilegeUnderASweepingRun: run, not root and
// without a cgroup (the sweeps' signals are all it kills with), starts the
// command with no_new_privs, so a setuid-root program of the tree runs as
// run's user, whom the sweeps can kill, and not as root, whom they cannot
// (`sudo job` outlived the SIGKILL by 11 s in a review's experiment, and
// the next host started its command meanwhile).
func TestASetuidProgramGainsNoPrivilegeUnderASweepingRun(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		unavailable(t, "making a setuid-root program and starting run as another user needs root")
	}
	const nobody = 65534
	dir := t.TempDir() // 0700: nobody else can plant a link before the copies are made
	copyFile := func(from, to string, mode os.FileMode) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(to, mode); err != nil { // WriteFile's mode passes the umask, and no setuid bit
			t.Fatal(err)
		}
	}
	leadership, id := filepath.Join(dir, "leadership"), filepath.Join(dir, "id")
	copyFile(bin, leadership, 0o755)
	idPath, err := exec.LookPath("id")
	if err != nil {
		t.Fatal(err)
	}
	copyFile(idPath, id, 0o755|os.ModeSetuid)
	// Then nobody may enter the directory and write its database there.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	asNobody := func(args ...string) (string, string) {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &out, &errb
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errb.String())
		}
		return strings.TrimSpace(out.String()), errb.String()
	}
	if euid, _ := asNobody(id, "-u"); euid != "0" {
		unavailable(t, "a setuid-root program runs as "+euid+" here, not as root (a nosuid mount?)")
	}
	euid, logs := asNobody(leadership, "run", "--name", "suid", "--dsn", "sqlite:"+filepath.Join(dir, "flags.db"), "--", id, "-u")
	for _, want := range []string{mechanisms["scan"], "runs with no_new_privs"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("run as uid %d did not log %q; stderr:\n%s", nobody, want, logs)
		}
	}
	if euid != strconv.Itoa(nobody) {
		t.Fatalf("the setuid-root program in the tree of run (uid %d, sweeps) ran with effective uid %s, want %d; stderr:\n%s", nobody, euid, nobody, logs)
	}
}
