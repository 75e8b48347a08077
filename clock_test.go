package leadership_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/faultstore"
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

// A suspend of the machine stops the monotonic clock that Raised reads, but
// not the world: the database clock and the other processes go on. The
// tests below run in the frame of the suspended process (the bubble's
// virtual time is its monotonic clock), so a suspend of d is an instant at
// which the database clock and the process's boot clock jump d ahead.

const suspendFor = 3 * testLease

// machine is the clock pair of the suspended process and the clock of the
// database it talks to.
type machine struct {
	start time.Time
	slept atomic.Int64 // nanoseconds suspended so far
	db    jumpingClock // the database runs on by the time the process was suspended
}

func newMachine() *machine { return &machine{start: time.Now()} }

func (m *machine) clocks() (mono, boot time.Duration) {
	mono = time.Since(m.start)
	return mono, mono + time.Duration(m.slept.Load())
}

func (m *machine) database() time.Time { return m.db.now() }

func (m *machine) suspend(d time.Duration) {
	m.slept.Add(int64(d))
	m.db.jump(d)
}

func (m *machine) flag(t *testing.T, s leadership.Store, process string) *leadership.Flag {
	return build(t, s, process, func(b *leadership.FlagBuilder) { b.ClocksForTest(m.clocks) })
}

// suspendInFlight suspends the machine after the next acquire has taken
// effect in the database and before its reply reaches the process, and
// holds the reply until release is closed.
type suspendInFlight struct {
	leadership.Store
	m         *machine
	armed     atomic.Bool
	suspended chan struct{}
	release   chan struct{}
}

func (s *suspendInFlight) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	res, err := s.Store.Acquire(ctx, req)
	if s.armed.CompareAndSwap(true, false) {
		s.m.suspend(suspendFor)
		close(s.suspended)
		<-s.release
	}
	return res, err
}

func TestReplyFromBeforeASuspendIsNotTrusted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine()
		s := memstore.New(memstore.WithClock(m.database))
		wrap := &suspendInFlight{Store: s, m: m, suspended: make(chan struct{}), release: make(chan struct{})}
		a := m.flag(t, wrap, "a")
		b := build(t, s, "b", func(b *leadership.FlagBuilder) { b.PollInterval(100 * time.Millisecond) })
		wrap.armed.Store(true)
		<-wrap.suspended // a's renewal took effect, then the machine slept for 3 leases
		if err := b.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		close(wrap.release) // the reply to the renewal arrives after the resume
		synctest.Wait()
		if a.Raised() {
			t.Fatal("a raised on the reply to a renewal sent before a suspend longer than its lease, while b leads")
		}
		for range 3 * testLease / time.Millisecond {
			if a.Raised() && b.Raised() {
				t.Fatal("a and b raised at once")
			}
			time.Sleep(time.Millisecond)
		}
		if tok, _ := b.Token(); tok != 2 || a.Raised() {
			t.Fatalf("b's token %d, a raised %v; want b leading at token 2", tok, a.Raised())
		}
	})
}

func TestHolderResumedFromSuspendLowersAtItsNextAttempt(t *testing.T) {
	t.Run("without precheck", func(t *testing.T) { testResumedHolderLowers(t, nil) })
	// A precheck may take up to Timeout: the flag must not wait for it.
	t.Run("with a slow precheck", func(t *testing.T) {
		testResumedHolderLowers(t, func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		})
	})
}

func testResumedHolderLowers(t *testing.T, precheck func(context.Context) error) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine()
		s := memstore.New(memstore.WithClock(m.database))
		cut := faultstore.Wrap(s)
		start := time.Now()
		a := build(t, cut, "a", func(b *leadership.FlagBuilder) {
			b.ClocksForTest(m.clocks)
			b.Precheck(precheck)
		})
		renew := testLease / 3
		pre := time.Duration(0) // how long the precheck takes: the Timeout, Lease/5
		if precheck != nil {
			pre = testLease / 5
		}
		b := build(t, s, "b", func(b *leadership.FlagBuilder) { b.PollInterval(100 * time.Millisecond) })
		// a's attempts start at 0 and every pre + renew from then on; each
		// sends after its precheck. Suspend just after the second send.
		time.Sleep(time.Until(start.Add(2*pre + renew + time.Millisecond)))
		// The machine sleeps for 3 leases and resumes without its network:
		// a's renewals fail, so only suspend detection can lower it before
		// the end of its trust window by its stopped clock (9 s away).
		m.suspend(suspendFor)
		cut.Fail(errors.New("network down after resume"))
		resumed := time.Now()
		if err := b.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		bRaised := time.Since(resumed)
		for a.Raised() {
			time.Sleep(time.Millisecond)
		}
		lowered := time.Since(resumed)
		// a's next attempt was due one renew interval after the last send,
		// by the clock that stopped: renew − 1 ms after the resume. It
		// must lower before its precheck, not after.
		if lowered > renew {
			t.Fatalf("a lowered %v after the resume, want at its next attempt, within the renew interval %v", lowered, renew)
		}
		t.Logf("b raised %v after the resume; a lowered %v after the resume (its next attempt); both raised for %v",
			bRaised, lowered, lowered-bRaised)
		cut.Fail(nil)
		time.Sleep(testLease)
		if a.Raised() || !b.Raised() {
			t.Fatalf("after the network came back: a raised %v, b raised %v; want b only", a.Raised(), b.Raised())
		}
	})
}

// The real clock pair must not report a suspend while the machine is
// awake, even when the reading goroutine is preempted between its reads.
func TestOSClocksSeeNoSuspendWhileAwake(t *testing.T) {
	mono, boot := leadership.OSClocksForTest()
	first := boot - mono
	if mono == 0 && boot == 0 {
		t.Skip("no CLOCK_BOOTTIME on this system: suspend detection is off")
	}
	spread := time.Duration(0)
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		mono, boot := leadership.OSClocksForTest()
		spread = max(spread, (boot - mono - first).Abs())
	}
	if spread > leadership.SuspendToleranceForTest {
		t.Fatalf("boot − mono moved by %v while awake, more than the tolerance %v", spread, leadership.SuspendToleranceForTest)
	}
	t.Logf("boot − mono moved by at most %v while awake", spread)
}

func BenchmarkOSClocks(b *testing.B) {
	for b.Loop() {
		leadership.OSClocksForTest()
	}
}
