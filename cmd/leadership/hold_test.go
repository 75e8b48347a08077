//go:build linux

package main

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// cronJob is a short job: it appends "start PID PPID NANOS" to the marks
// file and exits after 200 ms.
const cronJob = `echo "start $$ $PPID $(date +%s%N)" >> "$MARKS"; sleep 0.2`

// startCron starts `leadership run --skip-if-held` of cronJob with a 4 s
// lease (the later --lease wins over startRunScript's), as a cron entry
// on one host would, plus the extra flags.
func startCron(t *testing.T, dsn, name, marks string, extra ...string) *runner {
	t.Helper()
	return startRunScript(t, dsn, name, marks, cronJob, append([]string{"--lease", "4s", "--skip-if-held"}, extra...)...)
}

// TestCronRunsOncePerSchedule: hosts whose cron fires 0.5 s apart run a
// 0.2 s job once, because --skip-if-held holds the flag for one lease
// (4 s) after the job started; a host whose cron fires after the hold
// runs it again; with --hold 0 the flag is released at exit, and a host
// starting right after runs it again.
func TestCronRunsOncePerSchedule(t *testing.T) {
	for db, dsnOf := range databases() {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			dsn, name := dsnOf(t), uniqueName(t)
			marks := filepath.Join(t.TempDir(), "marks")
			var hosts []*runner
			for i := range 3 {
				if i > 0 {
					time.Sleep(500 * time.Millisecond)
				}
				hosts = append(hosts, startCron(t, dsn, name, marks))
			}
			for i, h := range hosts {
				if code := h.wait(t, 20*time.Second); code != 0 {
					t.Fatalf("host %d exited %d, want 0", i, code)
				}
			}
			s := starts(readMarks(t, marks))
			if len(s) != 1 {
				t.Fatalf("%d hosts ran the job, want 1: %+v", len(s), s)
			}
			// The host that ran it held the flag for the lease, 4 s from
			// about when the job started, and then exited.
			held := time.Since(s[0].at) // every host has exited
			if held < 3900*time.Millisecond {
				t.Fatalf("all hosts exited %v after the job started, want the holder to hold for about 4s", held)
			}
			t.Logf("%s: 3 hosts 0.5 s apart ran the job once; all exited %v after it started", db, held.Round(time.Millisecond))

			// After the hold, the next schedule runs it again.
			if code := startCron(t, dsn, name, marks, "--hold", "0").wait(t, 20*time.Second); code != 0 {
				t.Fatalf("host after the hold exited %d", code)
			}
			if n := len(starts(readMarks(t, marks))); n != 2 {
				t.Fatalf("%d runs after a host started past the hold, want 2", n)
			}

			// --hold 0: release at exit, so a host starting right after the
			// job ended runs it again (with the default hold it would skip).
			for range 2 {
				if code := startCron(t, dsn, name, marks, "--hold", "0").wait(t, 20*time.Second); code != 0 {
					t.Fatalf("host with --hold 0 exited %d", code)
				}
			}
			if n := len(starts(readMarks(t, marks))); n != 4 {
				t.Fatalf("%d runs with --hold 0, want 4 (each host ran it)", n)
			}
		})
	}
}

// TestHoldEndsAtSignal: SIGTERM during the hold releases the flag at once
// and run exits with the command's status.
func TestHoldEndsAtSignal(t *testing.T) {
	dsn, name := "sqlite:"+filepath.Join(t.TempDir(), "flags.db"), uniqueName(t)
	marks := filepath.Join(t.TempDir(), "marks")
	h := startCron(t, dsn, name, marks, "--hold", "1m")
	waitFor(t, 10*time.Second, "the job runs", func() bool { return len(starts(readMarks(t, marks))) == 1 })
	time.Sleep(500 * time.Millisecond) // the job has exited; the flag is held
	if code, out, errs := cli(t, "run", "--dsn", dsn, "--name", name, "--skip-if-held", "--", "echo", "ran"); code != 0 || out != "" {
		t.Fatalf("a host during the hold = %d %q %q, want a skip", code, out, errs)
	}
	stopped := time.Now()
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := h.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("run exited %d after SIGTERM during the hold, want the job's 0", code)
	}
	t.Logf("run exited %v after SIGTERM during the hold", time.Since(stopped).Round(time.Millisecond))
	if code, out, errs := cli(t, "run", "--dsn", dsn, "--name", name, "--skip-if-held", "--hold", "0", "--", "echo", "ran"); code != 0 || out != "ran\n" {
		t.Fatalf("a host after the hold was cut short = %d %q %q, want it to run", code, out, errs)
	}
}

// TestHoldWithWaitAndUnstartedCommand: a host waiting with --wait shorter
// than another's --hold exits 0 without running the job; a command that
// could not be started is not held for.
func TestHoldWithWaitAndUnstartedCommand(t *testing.T) {
	dsn, name := "sqlite:"+filepath.Join(t.TempDir(), "flags.db"), uniqueName(t)
	marks := filepath.Join(t.TempDir(), "marks")
	first := startRunScript(t, dsn, name, marks, cronJob, "--hold", "20s")
	waitFor(t, 10*time.Second, "the job runs", func() bool { return len(starts(readMarks(t, marks))) == 1 })
	begin := time.Now()
	if code := startRunScript(t, dsn, name, marks, cronJob, "--wait", "2s", "--hold", "20s").wait(t, 15*time.Second); code != 0 {
		t.Fatalf("a host waiting 2 s during a 20 s hold exited %d, want 0", code)
	}
	if n := len(starts(readMarks(t, marks))); n != 1 || time.Since(begin) < 2*time.Second {
		t.Fatalf("%d runs after %v; want the waiting host to give up after 2 s without running", n, time.Since(begin))
	}
	select {
	case <-first.exited:
		t.Fatal("the first host exited during its hold")
	default:
	}

	other := uniqueName(t)
	begin = time.Now()
	if code, _, errs := cli(t, "run", "--dsn", dsn, "--name", other, "--skip-if-held", "--", "/no/such/command"); code != 127 {
		t.Fatalf("missing command = %d, %q; want 127", code, errs)
	}
	if took := time.Since(begin); took > 10*time.Second {
		t.Fatalf("run of a missing command with --skip-if-held took %v: held for the default 15 s lease", took)
	}
	if code, out, _ := cli(t, "run", "--dsn", dsn, "--name", other, "--skip-if-held", "--hold", "0", "--", "echo", "ran"); code != 0 || out != "ran\n" {
		t.Fatalf("the next host = %d %q, want it to run: no hold after a command that never started", code, out)
	}
}
