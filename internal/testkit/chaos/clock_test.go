//go:build unix

package chaos

import (
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// skew is how far ahead the clocks of a skewed worker run: ten days.
const skew = 10 * 24 * time.Hour

// skewed is the command prefix that runs a worker in a time namespace of
// its own whose CLOCK_MONOTONIC and CLOCK_BOOTTIME run skew ahead of ours.
//
// Linux cannot offset one process's wall clock (CLOCK_REALTIME has no
// namespace) and faketime cannot reach a Go program, which reads clocks
// through the vDSO, not libc. The flag never reads the wall clock to
// decide (Raised compares monotonic readings; expiry is decided by the
// database's clock in SQL), so the clock that matters is the monotonic one:
// skewing it shows that only differences of a process's own readings
// count, never their values against another process's. On SQLite the
// skew also moves the CLOCK_BOOTTIME that the store's SQL reads; the store
// takes the namespace's offset off, or the skewed worker's terms would
// look ten days long.
func skewed(t *testing.T) []string {
	t.Helper()
	secs := int64(skew / time.Second)
	prefix := []string{"unshare", "--time", "--monotonic", strconv.FormatInt(secs, 10), "--boottime", strconv.FormatInt(secs, 10)}
	if out, err := exec.Command(prefix[0], append(prefix[1:], "true")...).CombinedOutput(); err != nil {
		testdb.Unavailable(t, "a time namespace (unshare --time, root, Linux 5.6+)", "-", string(out)+err.Error())
	}
	return prefix
}

// scenarioClock runs a worker whose clocks run ten days ahead (its reports
// are shifted back for the checker): it leads, is killed, and a normal
// worker takes over within crashBound; then a skewed worker takes over
// within crashBound from a normal holder frozen by SIGSTOP, which must
// resume lowered.
func scenarioClock(t *testing.T, c *cluster) {
	prefix, offset := skewed(t), int64(skew)
	a := c.start("", offset, prefix...)
	if got := c.leader(); got != a {
		t.Fatalf("leader = %s, want the only worker %s", got, a)
	}
	b := c.start("", 0)
	at := c.kill(a)
	if got, took := c.waitLeader(crashBound, at, a); got != b {
		t.Fatalf("leader after killing the skewed holder = %s, want %s", got, b)
	} else {
		c.record("kill", took)
	}
	a2 := c.start("", offset, prefix...)
	at = Mono()
	c.signal(b, syscall.SIGSTOP)
	got, took := c.waitLeader(crashBound, at, b)
	if got != a2 {
		t.Fatalf("leader after freezing %s = %s, want the skewed %s", b, got, a2)
	}
	c.record("stop", took)
	time.Sleep(2*lease - took)
	c.resume(b)
	time.Sleep(lease)
}
