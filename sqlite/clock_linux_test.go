package sqlite_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/sqlite"
)

// envPrintClock makes the test binary print its clocks and exit (see
// TestMain), for TestHostClockIgnoresTimeNamespaces.
const envPrintClock = "LEADERSHIP_SQLITE_PRINT_CLOCK"

// envUnshared makes the test binary call unshare(CLONE_NEWTIME), read the
// host clock and print the error (see TestMain).
const envUnshared = "LEADERSHIP_SQLITE_UNSHARED"

// TestHostClockRefusesUnknownOffsets: between unshare(CLONE_NEWTIME) and
// the next exec a process cannot read its own offsets; the store refuses.
func TestHostClockRefusesUnknownOffsets(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envUnshared+"=1")
	out, err := cmd.Output()
	if err != nil {
		testdb.Unavailable(t, "a time namespace (unshare(CLONE_NEWTIME), root, Linux 5.6+)", "-", string(out)+err.Error())
	}
	if !strings.Contains(string(out), "unshare(CLONE_NEWTIME)") {
		t.Fatalf("host clock after unshare without exec: %q, want an error naming unshare(CLONE_NEWTIME)", out)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(envUnshared) == "1" {
		if err := unix.Unshare(unix.CLONE_NEWTIME); err != nil {
			fmt.Println("unshare:", err)
			os.Exit(2)
		}
		_, err := sqlite.HostMillis()
		fmt.Println(err)
		os.Exit(0)
	}
	if os.Getenv(envPrintClock) == "1" {
		host, err := sqlite.HostMillis()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
		fmt.Println(host, time.Duration(ts.Nano()).Milliseconds())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestHostClockIgnoresTimeNamespaces reads the host clock in a process
// whose time namespace runs CLOCK_BOOTTIME ten days ahead (as the chaos
// suite's skewed worker does): it must read what this process reads.
func TestHostClockIgnoresTimeNamespaces(t *testing.T) {
	t.Parallel()
	const skew = 10 * 24 * time.Hour
	secs := fmt.Sprint(int64(skew / time.Second))
	cmd := exec.Command("unshare", "--time", "--boottime", secs, "--monotonic", secs, os.Args[0])
	cmd.Env = append(os.Environ(), envPrintClock+"=1")
	before, err := sqlite.HostMillis()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + string(ee.Stderr)
		}
		testdb.Unavailable(t, "a time namespace (unshare --time, root, Linux 5.6+)", "-", msg)
	}
	after, err := sqlite.HostMillis()
	if err != nil {
		t.Fatal(err)
	}
	var host, raw int64
	if _, err := fmt.Sscan(strings.TrimSpace(string(out)), &host, &raw); err != nil {
		t.Fatalf("child printed %q: %v", out, err)
	}
	if host < before || host > after {
		t.Fatalf("host clock in the time namespace = %d, want between %d and %d, as read outside (off by %v)",
			host, before, after, time.Duration(host-before)*time.Millisecond)
	}
	if d := time.Duration(raw-host) * time.Millisecond; d < skew-time.Second || d > skew+time.Second {
		t.Fatalf("the child's CLOCK_BOOTTIME ran %v ahead of its host clock, want %v: was it in a time namespace?", d, skew)
	}
}

func TestParseTimensOffsets(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"monotonic           0         0\nboottime            0         0\n", 0, ""},
		{"monotonic      864000         0\nboottime       864000         5\n", 864000*time.Second + 5, ""},
		{"boottime -3 999999999\n", -3*time.Second + 999999999, ""},
		{"7 2 0\n", 2 * time.Second, ""},
		{"monotonic 1 0\n", 0, "no boottime line"},
		{"boottime x 0\n", 0, "parse timens_offsets"},
	} {
		got, err := sqlite.ParseTimensOffsets(strings.NewReader(c.in))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parse %q = %v, %v; want an error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parse %q = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}
