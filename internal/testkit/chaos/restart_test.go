//go:build unix

package chaos

import (
	"testing"
	"time"
)

// scenarioRestart crashes a private database server under three workers:
// the holder must lower within lease + slack (it cannot renew), nobody may
// raise while the server is down, and once it is back a worker must raise
// within restartBound.
func scenarioRestart(t *testing.T, srv *privateServer) {
	// restartBound: the row expired during the outage, so the first
	// attempt after the return wins; followers retry at least every poll.
	const restartBound = 2*poll + slack
	c := newCluster(t, srv.dsn)
	for range 3 {
		c.start("", 0)
	}
	holder := c.leader()
	down := Mono()
	srv.stop()
	for deadline := time.Now().Add(lease + slack); ; time.Sleep(2 * time.Millisecond) {
		if id, _ := c.raisedSince(0); id == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a worker is still raised %v after the database went down", lease+slack)
		}
	}
	lowered := time.Duration(Mono() - down)
	time.Sleep(lease)
	// Every run counts, also one that has ended or whose worker exited.
	for id, rep := range c.reports() {
		for _, iv := range rep.Intervals {
			if iv.Start >= down {
				t.Fatalf("%s raised while the database was down", id)
			}
		}
	}
	restarting := Mono()
	srv.run() // returns once the server answers; a worker may already have raised
	startup := time.Duration(Mono() - restarting)
	next, took := c.waitLeader(startup+restartBound, restarting)
	c.record("restart", took)
	t.Logf("database down: holder %s lowered after %v; restarted: server ready after %v, %s raised %v after the restart began",
		holder, lowered.Round(time.Millisecond), startup.Round(time.Millisecond), next, took.Round(time.Millisecond))
}
