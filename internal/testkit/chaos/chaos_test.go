//go:build unix

package chaos

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// EnvLong, when "1", runs the long mode: many forced takeovers per
// database (LEADERSHIP_CHAOS_TAKEOVERS, default 500) instead of a few.
const (
	EnvLong      = "LEADERSHIP_CHAOS_LONG"
	EnvTakeovers = "LEADERSHIP_CHAOS_TAKEOVERS"
)

// rounds is how many crashes the Kill scenario forces.
func rounds(t *testing.T) int {
	if os.Getenv(EnvLong) != "1" {
		return 3
	}
	n := 500
	if v := os.Getenv(EnvTakeovers); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", EnvTakeovers, v)
		}
	}
	return n
}

// TestChaosSQLite runs the process faults on one SQLite file shared by the
// worker processes. There is no server to restart or network to cut.
func TestChaosSQLite(t *testing.T) {
	processFaults(t, func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "flags.db") })
}

// TestChaosPostgres runs the scenarios on PostgreSQL: the shared server for
// process faults, a TCP proxy for the network, a private server to restart.
func TestChaosPostgres(t *testing.T) {
	db := postgresDB(t)
	processFaults(t, func(*testing.T) string { return db.dsn })
	t.Run("Network", func(t *testing.T) { scenarioNetwork(t, db) })
	t.Run("Restart", func(t *testing.T) { scenarioRestart(t, startPrivatePostgres(t)) })
}

// TestChaosMariaDB is TestChaosPostgres on MariaDB (or MySQL).
func TestChaosMariaDB(t *testing.T) {
	db := mysqlDB(t)
	processFaults(t, func(*testing.T) string { return db.dsn })
	t.Run("Network", func(t *testing.T) { scenarioNetwork(t, db) })
	t.Run("Restart", func(t *testing.T) { scenarioRestart(t, startPrivateMariaDB(t)) })
}

// processFaults runs the scenarios every database runs, those that fault
// the worker processes and their clocks, each on a new cluster on the
// store dsn names for the subtest.
func processFaults(t *testing.T, dsn func(*testing.T) string) {
	t.Run("Kill", func(t *testing.T) { scenarioKill(t, newCluster(t, dsn(t))) })
	t.Run("Stop", func(t *testing.T) { scenarioStop(t, newCluster(t, dsn(t))) })
	t.Run("Term", func(t *testing.T) { scenarioTerm(t, newCluster(t, dsn(t))) })
	t.Run("Clock", func(t *testing.T) { scenarioClock(t, newCluster(t, dsn(t))) })
}

// scenarioKill SIGKILLs the holder again and again among three workers,
// starting a replacement each time; a follower must raise within
// crashBound of each kill. In the long mode the faults rotate: SIGKILL,
// SIGTERM (a follower must raise within handoverBound) and SIGSTOP for
// about 1.5 leases (crashBound; the holder resumes as a follower).
func scenarioKill(t *testing.T, c *cluster) {
	for range 3 {
		c.start("", 0)
	}
	long := os.Getenv(EnvLong) == "1"
	for i := range rounds(t) {
		holder := c.leader()
		switch {
		case !long || i%3 == 0:
			at := c.kill(holder)
			_, took := c.waitLeader(crashBound, at, holder)
			c.record("kill", took)
			c.start("", 0)
		case i%3 == 1:
			at := c.term(holder)
			_, took := c.waitLeader(handoverBound, at, holder)
			c.record("term", took)
			c.start("", 0)
		default:
			at := Mono()
			c.signal(holder, syscall.SIGSTOP)
			_, took := c.waitLeader(crashBound, at, holder)
			c.record("stop", took)
			time.Sleep(lease / 2)
			c.resume(holder)
		}
	}
}

// scenarioStop freezes the holder with SIGSTOP for two leases: a follower
// must raise within crashBound, and the holder, resumed, must find its
// flag lowered (its trust window ended while it was frozen).
func scenarioStop(t *testing.T, c *cluster) {
	for range 3 {
		c.start("", 0)
	}
	holder := c.leader()
	at := Mono()
	c.signal(holder, syscall.SIGSTOP)
	next, took := c.waitLeader(crashBound, at, holder)
	c.record("stop", took)
	time.Sleep(2*lease - took)
	c.resume(holder)
	t.Logf("%s froze, %s took over after %v, %s resumed lowered", holder, next, took.Round(time.Millisecond), holder)
	time.Sleep(lease) // the checker sees both after the resume
}

// scenarioTerm stops the holder gracefully (SIGTERM: Close releases): a
// follower must raise within handoverBound, well under a lease.
func scenarioTerm(t *testing.T, c *cluster) {
	for range 3 {
		c.start("", 0)
	}
	for range 3 {
		holder := c.leader()
		at := c.term(holder)
		_, took := c.waitLeader(handoverBound, at, holder)
		c.record("term", took)
		c.start("", 0)
	}
}

// TestChaosHarnessDetectsTwoLeaders shows the whole chain (workers, their
// reports, the checker) catches two leaders: two workers on different
// SQLite files both raise the same flag name, and the checker must report
// their runs as overlapping and their token (version 1 of each file) as
// shared.
func TestChaosHarnessDetectsTwoLeaders(t *testing.T) {
	other := "sqlite:" + filepath.Join(t.TempDir(), "other.db")
	migrate(t, other)
	c := newCluster(t, "sqlite:"+filepath.Join(t.TempDir(), "flags.db"))
	c.wantOverlap, c.wantSharedToken = true, true
	first := c.start("", 0)
	c.leader()
	c.start(other, 0)
	c.waitLeader(lease+slack, 0, first)
	time.Sleep(100 * time.Millisecond)
}
