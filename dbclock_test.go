package leadership_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/faultstore"
	"github.com/dbflag/leadership/memstore"
)

// The package documentation assumes only a bound on the rate of the
// database clock: a backward jump delays failover by its size, a forward
// jump beyond the safety margin gives two leaders. These tests hold it to
// both sentences.

// jumpingClock is a database clock that the test can step.
type jumpingClock struct{ offset atomic.Int64 }

func (c *jumpingClock) now() time.Time       { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *jumpingClock) jump(d time.Duration) { c.offset.Add(int64(d)) }

func TestBackwardJumpOfTheDatabaseClockOnlyDelaysFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var clock jumpingClock
		s := memstore.New(memstore.WithClock(clock.now))
		cut := faultstore.Wrap(s)
		a := build(t, cut, "a")
		b := build(t, s, "b")
		jump := 2 * testLease
		clock.jump(-jump)
		time.Sleep(time.Millisecond) // a renewed at 0 (Build); it renews next at 10s/3
		cut.Fail(errors.New("crashed"))
		lastRenewal := time.Now().Add(-time.Millisecond)
		for !b.Raised() {
			if a.Raised() && time.Since(lastRenewal) >= testLease-testLease/10 {
				t.Fatal("a still raised past its trust window")
			}
			time.Sleep(time.Millisecond)
		}
		if a.Raised() {
			t.Fatal("two leaders after a backward jump of the database clock")
		}
		// The row was written before the jump: it expires one lease plus
		// the jump after a's last renewal. b polls every 2 s at most.
		took := time.Since(lastRenewal)
		if took < testLease+jump || took > testLease+jump+2*time.Second {
			t.Fatalf("b raised %v after a's last renewal, want the lease plus the jump %v (and at most a poll)", took, testLease+jump)
		}
	})
}

func TestForwardJumpOfTheDatabaseClockBeyondTheMarginGivesTwoLeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var clock jumpingClock
		s := memstore.New(memstore.WithClock(clock.now))
		a := build(t, s, "a")
		b := build(t, s, "b", func(b *leadership.FlagBuilder) { b.PollInterval(100 * time.Millisecond) })
		clock.jump(testLease) // a step forward by a lease, far beyond the 1 s margin
		time.Sleep(200 * time.Millisecond)
		if !a.Raised() || !b.Raised() {
			t.Fatalf("a raised %v, b raised %v: the documented failure did not happen; update the package documentation", a.Raised(), b.Raised())
		}
	})
}
