package storetest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/faultstore"
)

// Timings of the flag tests: short enough to run in seconds, long enough
// for a loaded CI machine running the race detector. Bounds asserted on
// them are generous correctness bounds, not performance targets.
const (
	lease = time.Second
	poll  = 250 * time.Millisecond
	slack = 2 * time.Second
)

var errOutage = errors.New("storetest: injected outage")

func runFlags(t *testing.T, open Open) {
	t.Run("ManyFlagsPerStore", func(t *testing.T) {
		t.Parallel()
		checkManyFlagsPerStore(t, open)
	})
	t.Run("OneLeaderAmongMany", func(t *testing.T) {
		t.Parallel()
		mon := newMonitor(t)
		name := uniqueName(t)
		for range 4 {
			mon.build(t, open(t), name, lease)
		}
		mon.waitForLeader(t, lease+slack)
		time.Sleep(2 * lease)
		if n := mon.raised(); n != 1 {
			t.Fatalf("%d flags raised after 2 leases, want 1", n)
		}
	})
	t.Run("GracefulHandoverIsPrompt", func(t *testing.T) {
		t.Parallel()
		mon := newMonitor(t)
		name := uniqueName(t)
		mon.build(t, open(t), name, lease)
		mon.build(t, open(t), name, lease)
		checkGracefulHandover(t, mon)
	})
	t.Run("GracefulHandoverBetweenStoresOfOneProcessIsPrompt", func(t *testing.T) {
		// Two stores of one process: flags built without Process have
		// one holder name, the process's.
		t.Parallel()
		mon := newMonitor(t)
		name := uniqueName(t)
		for range 2 {
			s := open(t)
			connect(t, s)
			mon.buildWith(t, leadership.NewFlag().Store(s).Name(name), lease)
		}
		checkGracefulHandover(t, mon)
	})
	t.Run("CloseReleasesAndKeepsVersion", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		name := uniqueName(t)
		mon := newMonitor(t)
		f := mon.build(t, s, name, lease)
		mon.waitForLeader(t, slack)
		token, _ := f.Token()
		if err := f.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if f.Raised() {
			t.Fatal("Raised after Close")
		}
		if err := f.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		row := find(t, s, name)
		if row.Holder != "" || row.Version != token {
			t.Fatalf("row after Close = %+v, want released with version %d", row, token)
		}
	})
	t.Run("CrashedHolderReplacedAfterAboutOneLease", func(t *testing.T) {
		t.Parallel()
		mon := newMonitor(t)
		name := uniqueName(t)
		cut := faultstore.Wrap(open(t))
		leader := mon.build(t, cut, name, lease)
		mon.waitForLeader(t, slack)
		mon.build(t, open(t), name, lease)
		time.Sleep(lease / 2)
		crashed := time.Now()
		cut.Fail(errOutage) // the holder can no longer reach the database, as if it had died
		next := mon.waitForLeader(t, lease+slack, leader)
		took := time.Since(crashed)
		if took > lease+slack {
			t.Errorf("failover took %v, want about one lease (%v)", took, lease)
		}
		t.Logf("failover after the holder was cut off took %v (lease %v)", took, lease)
		if next.Raised() && leader.Raised() {
			t.Fatal("two leaders")
		}
		if err := leader.Check(); !errors.Is(err, leadership.ErrRenewalOverdue) {
			t.Errorf("Check of the cut-off holder = %v, want ErrRenewalOverdue", err)
		}
	})
	t.Run("StalledHolderLowersBeforeTakeover", func(t *testing.T) {
		t.Parallel()
		mon := newMonitor(t)
		name := uniqueName(t)
		stall := faultstore.Wrap(open(t))
		leader := mon.build(t, stall, name, lease)
		mon.waitForLeader(t, slack)
		mon.build(t, open(t), name, lease)
		resume := stall.Hang() // the holder's next call freezes before reaching the database
		next := mon.waitForLeader(t, 2*lease+slack, leader)
		if leader.Raised() {
			t.Fatal("the stalled holder still reports Raised after another process raised")
		}
		resume() // its stalled renewal now reaches the database, late
		time.Sleep(lease)
		if leader.Raised() {
			t.Fatal("the stalled holder raised again after waking while another holds the flag")
		}
		if !next.Raised() {
			t.Fatal("the new leader lost the flag to the woken holder")
		}
	})
	t.Run("OutageLowersThenRecovers", func(t *testing.T) {
		t.Parallel()
		mon := newMonitor(t)
		cut := faultstore.Wrap(open(t))
		f := mon.build(t, cut, uniqueName(t), lease)
		mon.waitForLeader(t, slack)
		cut.Fail(errOutage)
		cutAt := time.Now()
		for f.Raised() {
			if time.Since(cutAt) > lease {
				t.Fatalf("still raised %v into an outage, past the lease %v", time.Since(cutAt), lease)
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(lease / 2)
		if f.Raised() {
			t.Fatal("raised during the outage")
		}
		if err := f.Check(); !errors.Is(err, leadership.ErrRenewalOverdue) {
			t.Errorf("Check during the outage = %v, want ErrRenewalOverdue", err)
		}
		cut.Fail(nil)
		mon.waitForLeader(t, lease+slack)
		if err := f.Check(); err != nil {
			t.Errorf("Check after recovery = %v", err)
		}
	})
	t.Run("SameProcessNameNeverBothRaise", func(t *testing.T) {
		t.Parallel()
		mon := newMonitor(t)
		name := uniqueName(t)
		stall := faultstore.Wrap(open(t))
		connect(t, stall)
		a := mon.buildWith(t, leadership.NewFlag().Store(stall).Name(name).Process("twin"), lease)
		mon.waitForLeader(t, slack)
		other := open(t)
		connect(t, other)
		b := mon.buildWith(t, leadership.NewFlag().Store(other).Name(name).Process("twin"), lease)
		time.Sleep(lease)
		if b.Raised() {
			t.Fatal("the second instance with the same process name raised while the first holds the flag")
		}
		resume := stall.Hang()
		mon.waitForLeader(t, 2*lease+slack, a)
		resume()
		time.Sleep(lease)
		if a.Raised() {
			t.Fatal("the first instance renewed the second's term")
		}
	})
	t.Run("EvictedHolderLowersBeforeTakeover", func(t *testing.T) {
		t.Parallel()
		mon := newMonitor(t)
		name := uniqueName(t)
		s := open(t)
		leader := mon.build(t, s, name, lease)
		mon.waitForLeader(t, slack)
		mon.build(t, open(t), name, lease)
		// Read the token first: the eviction's notification can make the
		// holder notice and lower at once.
		token, ok := leader.Token()
		if !ok {
			t.Fatal("the leader has no token")
		}
		if ok, err := open(t).Evict(ctx(t), name); err != nil || !ok {
			t.Fatalf("Evict = %v, %v", ok, err)
		}
		evicted := time.Now()
		for leader.Raised() {
			if time.Since(evicted) > lease {
				t.Fatalf("the evicted holder still raised %v after the eviction", time.Since(evicted))
			}
			time.Sleep(time.Millisecond)
		}
		// The next term may go to either process, the evicted one included,
		// but only as a new term.
		next := mon.waitForLeader(t, lease+slack)
		if got, _ := next.Token(); got != token+1 {
			t.Fatalf("token after eviction = %d, want %d", got, token+1)
		}
	})
	t.Run("LongerLeaseIsRespected", func(t *testing.T) {
		t.Parallel()
		mon := newMonitor(t)
		name := uniqueName(t)
		cut := faultstore.Wrap(open(t))
		leader := mon.build(t, cut, name, 3*lease)
		mon.waitForLeader(t, slack)
		mon.build(t, open(t), name, lease/2)
		cut.Fail(errOutage)
		cutAt := time.Now()
		mon.waitForLeader(t, 3*lease+slack, leader)
		if took := time.Since(cutAt); took < lease {
			t.Fatalf("a short-lease follower took over %v after the long-lease holder was cut off, before its lease could end", took)
		}
	})
	runDefaults(t, open)
}

// checkGracefulHandover closes the leader among the monitor's flags and
// checks that another takes over, in the next term, well before the
// lease.
func checkGracefulHandover(t *testing.T, mon *monitor) {
	t.Helper()
	leader := mon.waitForLeader(t, lease+slack)
	token, _ := leader.Token()
	closed := time.Now()
	if err := leader.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	next := mon.waitForLeader(t, poll+slack)
	took := time.Since(closed)
	if next == leader {
		t.Fatal("the closed flag is still raised")
	}
	if got, _ := next.Token(); got != token+1 {
		t.Errorf("token after handover = %d, want %d", got, token+1)
	}
	if took >= lease {
		t.Errorf("graceful handover took %v, want well under the lease %v (release must not wait for expiry)", took, lease)
	}
	t.Logf("graceful handover took %v", took)
}

// monitor builds flags, samples them continually and fails the test if
// two are ever raised at once, checking also at each raise.
type monitor struct {
	t         *testing.T
	mu        sync.Mutex
	flags     []*leadership.Flag
	processes map[leadership.Store]string // by store: see process
	bad       atomic.Pointer[string]
	stop      func() // stops the sampler and waits for its last check
}

func newMonitor(t *testing.T) *monitor {
	m := &monitor{t: t}
	stop := make(chan struct{})
	done := make(chan struct{})
	m.stop = sync.OnceFunc(func() { close(stop); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				m.check("sample")
			}
		}
	}()
	t.Cleanup(func() {
		m.stop()
		m.mu.Lock()
		flags := m.flags
		m.mu.Unlock()
		for _, f := range flags {
			_ = f.Close()
		}
		if msg := m.bad.Load(); msg != nil {
			t.Errorf("SAFETY VIOLATION: %s", *msg)
		}
	})
	return m
}

// check records a violation when more than one flag is raised at once.
//
// It reads the flags one after the other, so one pass can see a flag
// raised before it lowered and the next one raised after a handover,
// although they never overlapped (the reads of a sampler preempted on a
// loaded machine span a handover easily). A violation is therefore
// recorded only when a second pass sees the same flags raised with the
// same tokens: with reads f@t1 < g@t2 < f@t3 < g@t4 all raised, f in one
// term throughout and g in another, one of the two terms is the later and
// began before the other flag's raised read that follows it, so that flag
// was raised after its term had ended or while a later one held: two
// terms at once either way.
func (m *monitor) check(when string) {
	m.mu.Lock()
	flags := m.flags
	m.mu.Unlock()
	first := raisedTokens(flags)
	if len(first) < 2 {
		return
	}
	second := raisedTokens(flags)
	var raised []string
	for i, f := range flags {
		if tok, ok := first[i]; ok && second[i] == tok {
			raised = append(raised, fmt.Sprintf("#%d(%s, token %d)", i, f.Process(), tok))
		}
	}
	if len(raised) > 1 {
		msg := fmt.Sprintf("%d flags raised at once (%s, seen in two passes): %v", len(raised), when, raised)
		m.bad.CompareAndSwap(nil, &msg)
	}
}

// raisedTokens reads the flags in order and returns the token of each one
// that was raised, by index.
func raisedTokens(flags []*leadership.Flag) map[int]int64 {
	out := make(map[int]int64)
	for i, f := range flags {
		if tok, ok := f.Token(); ok {
			out[i] = tok
		}
	}
	return out
}

func (m *monitor) raised() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, f := range m.flags {
		if f.Raised() {
			n++
		}
	}
	return n
}

// build builds a flag on s with the test timings, under the holder name
// of s's process.
func (m *monitor) build(t *testing.T, s leadership.Store, name string, lease time.Duration) *leadership.Flag {
	t.Helper()
	connect(t, s)
	return m.buildWith(t, leadership.NewFlag().Store(s).Name(name).Process(m.process(s)), lease)
}

// process is the holder name of the flags that build makes on s: each
// store stands for a process, and processes have names of their own (the
// default name is one per process, which every store of the test binary
// would share). Random, as the tests share the database: on MySQL a
// holder name is a lock, the bell, across the database.
func (m *monitor) process(s leadership.Store) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.processes == nil {
		m.processes = make(map[leadership.Store]string)
	}
	if p, ok := m.processes[s]; ok {
		return p
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	p := fmt.Sprintf("p%d-%x", len(m.processes), b)
	m.processes[s] = p
	return p
}

// buildWith completes b with the test timings and builds it. The
// timeout is a fifth of the lease, and 200 ms at least: a flag of half a
// lease got 100 ms, which three first attempts in a row on SQLite, behind
// the other stores' commits, ran out of on a loaded machine.
func (m *monitor) buildWith(t *testing.T, b *leadership.FlagBuilder, lease time.Duration) *leadership.Flag {
	t.Helper()
	return m.watch(t, b.Lease(lease).PollInterval(min(poll, lease/3)).Timeout(max(lease/5, 200*time.Millisecond)))
}

// watch builds b, checking at its every raise, and samples it from then
// on; the monitor closes it at the end of the test.
//
// A Build whose first attempt ran out of its Timeout is tried again, up to
// three times in all, as a service would: these tests give the first
// attempt a fifth of a one-second lease, and on SQLite it waits for the
// one write lock behind the other stores' commits, whose sync can take
// longer than that on a machine busy with other test packages. A first
// attempt that timed out may still have taken the row; the next Build
// then follows until that term expires, which the monitor watches like
// any other term.
func (m *monitor) watch(t *testing.T, b *leadership.FlagBuilder) *leadership.Flag {
	t.Helper()
	b = b.OnRaise(func(context.Context) { m.check("at raise") }).Migrate(false)
	f, err := b.Build(ctx(t))
	for try := 2; err != nil && errors.Is(err, context.DeadlineExceeded) && try <= 3; try++ {
		t.Logf("Build, try %d after its first attempt timed out: %v", try, err)
		f, err = b.Build(ctx(t))
	}
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	m.mu.Lock()
	m.flags = append(m.flags, f)
	m.mu.Unlock()
	return f
}

// connect opens the store's first connection before a Build and runs the
// acquire and release statements once on a name of its own: a flag's first
// attempt has only its Timeout, which a new connection (TCP,
// authentication) or a first statement (preparing it, warming the
// server's caches) can exceed on a loaded machine.
func connect(t *testing.T, s leadership.Store) {
	t.Helper()
	if _, _, err := s.Flags(ctx(t)); err != nil {
		t.Fatalf("Flags before Build: %v", err)
	}
	warm := uniqueName(t) + "-warm"
	res, err := s.Acquire(ctx(t), leadership.Request{Name: warm, Holder: "warm-up", Lease: time.Second})
	if err != nil {
		t.Fatalf("warm-up Acquire before Build: %v", err)
	}
	if _, err := s.Release(ctx(t), warm, "warm-up", res.Version); err != nil {
		t.Fatalf("warm-up Release before Build: %v", err)
	}
}

// waitForLeader waits up to limit for a raised flag other than the
// excluded ones and returns it.
func (m *monitor) waitForLeader(t *testing.T, limit time.Duration, exclude ...*leadership.Flag) *leadership.Flag {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		m.mu.Lock()
		flags := m.flags
		m.mu.Unlock()
	next:
		for _, f := range flags {
			for _, x := range exclude {
				if f == x {
					continue next
				}
			}
			if f.Raised() {
				return f
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no leader within %v", limit)
	return nil
}
