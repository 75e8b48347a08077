package leadership_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/faultstore"
	"github.com/dbflag/leadership/memstore"
)

// The tests in this file check the algorithm on the in-memory store in
// virtual time (testing/synctest), so exact instants can be asserted
// without sleeping. The same behaviours are checked in real time on every
// database by package storetest.

const testLease = 10 * time.Second

func build(t *testing.T, s leadership.Store, process string, opts ...func(*leadership.FlagBuilder)) *leadership.Flag {
	t.Helper()
	b := leadership.NewFlag().Store(s).Name("job").Process(process).Lease(testLease).Jitter(0)
	for _, o := range opts {
		o(b)
	}
	f, err := b.Build(context.Background())
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestFirstFlagRaisesAtBuildAndReleasesAtClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		f := build(t, s, "a")
		if !f.Raised() {
			t.Fatal("the only flag is not raised after Build")
		}
		if tok, ok := f.Token(); !ok || tok != 1 {
			t.Fatalf("Token = %d, %v; want 1, true", tok, ok)
		}
		if f.Holder() != "a" {
			t.Fatalf("Holder = %q, want a", f.Holder())
		}
		time.Sleep(5 * testLease) // renewals keep it raised and keep the token
		if tok, ok := f.Token(); !ok || tok != 1 {
			t.Fatalf("after renewals Token = %d, %v; want 1, true", tok, ok)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if f.Raised() {
			t.Fatal("raised after Close")
		}
		rows, _, _ := s.Flags(context.Background())
		if len(rows) != 1 || rows[0].Holder != "" || rows[0].Version != 1 {
			t.Fatalf("row after Close = %+v, want released at version 1", rows)
		}
		if err := f.Wait(context.Background()); !errors.Is(err, leadership.ErrClosed) {
			t.Fatalf("Wait after Close = %v, want ErrClosed", err)
		}
		if err := f.Check(); !errors.Is(err, leadership.ErrClosed) {
			t.Fatalf("Check after Close = %v, want ErrClosed", err)
		}
	})
}

func TestGracefulHandoverIsImmediateWithNotification(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		a := build(t, s, "a")
		b := build(t, s, "b")
		if !a.Raised() || b.Raised() {
			t.Fatal("want a raised, b lowered")
		}
		if b.Holder() != "a" {
			t.Fatalf("b sees holder %q, want a", b.Holder())
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // no virtual time passes: the release notification wakes b
		if !b.Raised() {
			t.Fatal("b did not raise at once after a's release")
		}
		if tok, _ := b.Token(); tok != 2 {
			t.Fatalf("b's token = %d, want 2", tok)
		}
	})
}

func TestGracefulHandoverByPollingWithoutNotification(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := withoutNotify{memstore.New()}
		a := build(t, s, "a")
		b := build(t, s, "b", func(b *leadership.FlagBuilder) { b.PollInterval(time.Second) })
		_ = a.Close()
		start := time.Now()
		if err := b.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("handover by polling took %v, want at most the poll interval 1s", took)
		}
	})
}

// TestAFollowerLogsWhoLeadsAtInfoOncePerChange: a follower logs the holder
// at Info when it first finds one, not at each of its many attempts
// after, and again when another process takes over, so an operator sees
// who leads without Debug.
func TestAFollowerLogsWhoLeadsAtInfoOncePerChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		a := build(t, s, "a")
		logs := &holderLog{}
		// b polls without notifications, so c (notified) takes over from a.
		build(t, withoutNotify{s}, "b", func(b *leadership.FlagBuilder) {
			b.PollInterval(time.Second).Logger(slog.New(logs))
		})
		time.Sleep(3 * testLease) // b attempts about 30 times
		synctest.Wait()           // b's attempt due at this instant has logged
		if got := logs.get(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("b logged the holders %q at Info in 30 attempts, want [a] once", got)
		}
		c := build(t, s, "c")
		_ = a.Close()
		synctest.Wait()
		if !c.Raised() {
			t.Fatal("c did not take over at a's release")
		}
		time.Sleep(3 * testLease)
		synctest.Wait()
		if got := logs.get(); !slices.Equal(got, []string{"a", "c"}) {
			t.Fatalf("b logged the holders %q at Info, want [a c]: once per change", got)
		}
	})
}

// holderLog records the "holder" of each record at Info or above.
type holderLog struct {
	mu      sync.Mutex
	holders []string
}

func (h *holderLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *holderLog) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *holderLog) WithGroup(string) slog.Handler                { return h }

func (h *holderLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "holder" {
			h.mu.Lock()
			h.holders = append(h.holders, a.Value.String())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

func (h *holderLog) get() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.holders)
}

// withoutNotify hides the store's ReleaseNotifier.
type withoutNotify struct{ leadership.Store }

// silentNotifier claims, through reach, that its release notifications
// reach other processes, but never sends one: a LISTEN behind a pooler in
// transaction mode.
type silentNotifier struct {
	leadership.Store
	reach atomic.Bool
}

func (s *silentNotifier) NotifyReleases(string) (<-chan struct{}, func()) { return nil, func() {} }
func (s *silentNotifier) NotifiesOtherProcesses() bool                    { return s.reach.Load() }

// TestDefaultPollFollowsTheStoresNotifications checks that a default poll
// interval is Lease (a follower waits for the holder's expiry) only while
// the store reports that its notifications reach other processes, asked at
// each wait, not once at Build, and capped at 2 s while it does not.
func TestDefaultPollFollowsTheStoresNotifications(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &silentNotifier{Store: memstore.New()}
		s.reach.Store(true)
		a := build(t, s, "a")
		start := time.Now()
		b := build(t, s, "b") // waits for a's expiry, a lease away, before its next attempt
		s.reach.Store(false)  // the store learns its notifications do not arrive
		time.Sleep(testLease + 500*time.Millisecond)
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := b.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		// b's attempt at Lease found a renewed holding; its next wait is
		// capped at 2 s, so it takes over at Lease + 2 s.
		if got, want := time.Since(start), testLease+2*time.Second; got != want {
			t.Fatalf("b took over %v after Build, want %v", got, want)
		}

		s.reach.Store(true)
		c := build(t, s, "c")
		start = time.Now()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		// The release's notification never came: c attempts at the
		// expiry of b's fresh term, a lease after c's Build, not earlier.
		if got, want := time.Since(start), testLease; got != want {
			t.Fatalf("with notifications reported, c attempted after %v, want at b's expiry, Lease = %v", got, want)
		}
	})
}

// TestAFollowerRetriesAnOutageAtLeastEveryThirdLease checks that a
// follower whose default poll interval is Lease (its store's notifications
// reach other processes) still retries failed attempts at least every
// Lease/3: a database that answers again sends no notification.
func TestAFollowerRetriesAnOutageAtLeastEveryThirdLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := memstore.New()
		cut := faultstore.Wrap(m)
		rec := &attemptTimes{Store: cut}
		s := &silentNotifier{Store: rec}
		s.reach.Store(true)
		a := build(t, m, "a")
		_ = build(t, s, "b") // waits for a's expiry, a lease away
		cut.Fail(errors.New("database unreachable"))
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(6 * testLease) // b's attempts fail from the expiry on, and back off
		times := rec.get()
		if len(times) < 4 {
			t.Fatalf("b made %d attempts in six leases, want several", len(times))
		}
		for i := 2; i < len(times); i++ { // from the second failed attempt on
			if gap := times[i].Sub(times[i-1]); gap > testLease/3 {
				t.Fatalf("b retried %v after a failed attempt, want within Lease/3 = %v (attempts at %v)", gap, testLease/3, times)
			}
		}
	})
}

// attemptTimes records when Acquire was called.
type attemptTimes struct {
	leadership.Store
	mu    sync.Mutex
	times []time.Time
}

func (s *attemptTimes) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	s.mu.Lock()
	s.times = append(s.times, time.Now())
	s.mu.Unlock()
	return s.Store.Acquire(ctx, req)
}

func (s *attemptTimes) get() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.times)
}

func TestCrashedHolderIsReplacedAtItsExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		cut := faultstore.Wrap(s)
		a := build(t, cut, "a")
		b := build(t, s, "b", func(b *leadership.FlagBuilder) { b.PollInterval(time.Hour) })
		time.Sleep(2 * time.Second)
		cut.Fail(errors.New("crashed"))
		// a's last renewal was at 0s (renew interval 10s/3): it expires at
		// 10s by the store clock, and it trusts its term until 9s.
		lastRenewal := time.Now().Add(-2 * time.Second)
		for !b.Raised() {
			if a.Raised() && time.Since(lastRenewal) >= testLease-testLease/10 {
				t.Fatalf("a still raised %v after its last renewal, past its trust window", time.Since(lastRenewal))
			}
			time.Sleep(time.Millisecond)
		}
		if a.Raised() {
			t.Fatal("two leaders")
		}
		if took := time.Since(lastRenewal); took < testLease || took > testLease+time.Millisecond {
			t.Fatalf("b raised %v after a's last renewal, want the lease %v (b schedules from the row's expiry)", took, testLease)
		}
	})
}

func TestStalledHolderLowersByItsOwnClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		stall := faultstore.Wrap(s)
		a := build(t, stall, "a")
		b := build(t, s, "b")
		sentAt := time.Now() // a's acquisition was sent at Build
		resume := stall.Hang()
		trustEnd := sentAt.Add(testLease - testLease/10)
		time.Sleep(time.Until(trustEnd) - time.Nanosecond)
		if !a.Raised() {
			t.Fatal("a lowered before the end of its trust window")
		}
		time.Sleep(time.Nanosecond)
		if a.Raised() {
			t.Fatal("a still raised at the end of its trust window while its goroutine is stalled")
		}
		if err := b.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		resume()
		synctest.Wait()
		time.Sleep(testLease)
		if a.Raised() || !b.Raised() {
			t.Fatalf("after a woke: a raised %v, b raised %v; want b only", a.Raised(), b.Raised())
		}
	})
}

func TestLateReplyIsNotTrusted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		stall := faultstore.Wrap(s)
		resume := stall.Hang()
		done := make(chan *leadership.Flag)
		go func() {
			done <- build(t, stall, "a", func(b *leadership.FlagBuilder) { b.Migrate(false) })
		}()
		time.Sleep(testLease) // the first attempt lands a whole lease late
		resume()
		a := <-done
		if a.Raised() {
			t.Fatal("raised on a reply that came after its trust window")
		}
		time.Sleep(testLease/3 + time.Millisecond) // the next attempt renews the term it did get
		if tok, ok := a.Token(); !ok || tok != 1 {
			t.Fatalf("after the next renewal Token = %d, %v; want 1, true", tok, ok)
		}
	})
}

func TestOutageLowersAtTrustEndAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cut := faultstore.Wrap(memstore.New())
		var lowered atomic.Int32
		a := build(t, cut, "a", func(b *leadership.FlagBuilder) { b.OnLower(func() { lowered.Add(1) }) })
		start := time.Now()
		cut.Fail(errors.New("database down"))
		time.Sleep(testLease - testLease/10 - time.Millisecond)
		if !a.Raised() {
			t.Fatal("errors lowered the flag inside its trust window")
		}
		if err := a.Check(); err != nil {
			t.Fatalf("Check inside the trust window = %v", err)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if a.Raised() || lowered.Load() != 1 {
			t.Fatalf("at the trust window's end: raised %v, OnLower calls %d", a.Raised(), lowered.Load())
		}
		if err := a.Check(); !errors.Is(err, leadership.ErrRenewalOverdue) {
			t.Fatalf("Check after the trust window = %v, want ErrRenewalOverdue", err)
		}
		cut.Fail(nil)
		if err := a.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if tok, _ := a.Token(); tok != 1 {
			t.Fatalf("token after recovery = %d, want 1 (nobody else held the flag)", tok)
		}
		if took := time.Since(start); took > 2*testLease {
			t.Fatalf("recovery took %v", took)
		}
		if err := a.Check(); err != nil {
			t.Fatalf("Check after recovery = %v", err)
		}
	})
}

func TestBuildFailsWhenTheDatabaseIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cut := faultstore.Wrap(memstore.New())
		cut.Fail(errors.New("connection refused"))
		_, err := leadership.NewFlag().Store(cut).Name("job").Build(context.Background())
		if err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("Build with the database down = %v, want the database error", err)
		}
		_, err = leadership.NewFlag().Store(cut).Name("job").Migrate(false).Build(context.Background())
		if err == nil || !strings.Contains(err.Error(), "first attempt") {
			t.Fatalf("Build without migrations, database down = %v, want the first attempt's error", err)
		}
	})
}

// TestSameProcessNameNeverBothRaise builds two flags of one name under one
// process name, given ("twin") or the default, which is one per process:
// they never both raise, also when the holder stalls past its lease.
func TestSameProcessNameNeverBothRaise(t *testing.T) {
	for _, process := range []string{"twin", ""} {
		t.Run("process="+process, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := memstore.New()
				stall := faultstore.Wrap(s)
				a := build(t, stall, process)
				b := build(t, s, process)
				if a.Process() != b.Process() {
					t.Fatalf("process names %q and %q, want one", a.Process(), b.Process())
				}
				if b.Raised() {
					t.Fatal("the second instance raised while the first holds the term")
				}
				resume := stall.Hang()
				if err := b.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
				resume()
				for range 100 {
					time.Sleep(testLease / 10)
					if a.Raised() && b.Raised() {
						t.Fatal("both instances raised")
					}
				}
				if a.Raised() {
					t.Fatal("the first instance renewed the second instance's term")
				}
			})
		})
	}
}

func TestLeaderContextAndCallbacksFollowTheTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		cut := faultstore.Wrap(s)
		jobStopped := make(chan struct{})
		var lowered atomic.Int32
		a := build(t, cut, "a", func(b *leadership.FlagBuilder) {
			b.OnRaise(func(ctx context.Context) { <-ctx.Done(); close(jobStopped) })
			b.OnLower(func() { lowered.Add(1) })
		})
		ctx, cancel, ok := a.LeaderContext(context.Background())
		defer cancel()
		if !ok {
			t.Fatal("LeaderContext of a raised flag reported false")
		}
		cut.Fail(errors.New("down"))
		<-ctx.Done()
		<-jobStopped
		synctest.Wait()
		if a.Raised() || lowered.Load() != 1 {
			t.Fatalf("after the context ended: raised %v, lowered %d times", a.Raised(), lowered.Load())
		}
		if _, _, ok := a.LeaderContext(context.Background()); ok {
			t.Fatal("LeaderContext of a lowered flag reported true")
		}
	})
}

func TestPrecheckVetoLowersAndReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		var veto atomic.Bool
		a := build(t, s, "a", func(b *leadership.FlagBuilder) {
			b.Precheck(func(context.Context) error {
				if veto.Load() {
					return errors.New("draining")
				}
				return nil
			})
		})
		b := build(t, s, "b")
		veto.Store(true)
		if err := b.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if a.Raised() {
			t.Fatal("the vetoed flag is still raised")
		}
		if tok, _ := b.Token(); tok != 2 {
			t.Fatalf("b's token = %d, want 2 (a released its term)", tok)
		}
	})
}

func TestWaitHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		build(t, s, "a")
		b := build(t, s, "b")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := b.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait = %v, want DeadlineExceeded", err)
		}
	})
}

func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		reg := prometheus.NewPedanticRegistry()
		withReg := func(b *leadership.FlagBuilder) { b.MetricsRegisterer(reg) }
		a := build(t, s, "a", withReg)
		build(t, s, "b", withReg)
		build(t, s, "c", withReg, func(b *leadership.FlagBuilder) { b.Name("other") })
		want := `
# HELP leadership_flag_state 1 while this process holds the leadership flag and trusts it, else 0.
# TYPE leadership_flag_state gauge
leadership_flag_state{name="job",process="a"} 1
leadership_flag_state{name="job",process="b"} 0
leadership_flag_state{name="other",process="c"} 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "leadership_flag_state"); err != nil {
			t.Fatal(err)
		}
		_ = a.Close()
		synctest.Wait()
		want = `
# HELP leadership_flag_state 1 while this process holds the leadership flag and trusts it, else 0.
# TYPE leadership_flag_state gauge
leadership_flag_state{name="job",process="b"} 1
leadership_flag_state{name="other",process="c"} 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "leadership_flag_state"); err != nil {
			t.Fatal(err)
		}
		if n := testutil.ToFloat64(counter(t, reg, "leadership_flag_transitions_total", "b", "raised")); n != 1 {
			t.Fatalf("b raised %v times, want 1", n)
		}
		if _, err := reg.Gather(); err != nil {
			t.Fatalf("pedantic gather: %v", err)
		}
	})
}

// counter finds one series of a counter on reg.
func counter(t *testing.T, reg *prometheus.Registry, name, process, to string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["process"] == process && labels["to"] == to {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "copy"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	t.Fatalf("no series %s{process=%q,to=%q}", name, process, to)
	return nil
}

func TestBuildRejectsBadSettings(t *testing.T) {
	s := memstore.New()
	for _, tc := range []struct {
		name  string
		b     *leadership.FlagBuilder
		field string
	}{
		{"no store", leadership.NewFlag().Name("x"), "Store"},
		{"no name", leadership.NewFlag().Store(s), "Name"},
		{"long name", leadership.NewFlag().Store(s).Name(strings.Repeat("x", 300)), "Name"},
		{"bad process", leadership.NewFlag().Store(s).Name("x").Process("a\x00b"), "Process"},
		{"padded name", leadership.NewFlag().Store(s).Name("nightly "), "Name"},
		{"negative lease", leadership.NewFlag().Store(s).Name("x").Lease(-time.Second), "Lease"},
		{"tiny lease", leadership.NewFlag().Store(s).Name("x").Lease(time.Millisecond), "Lease"},
		{"negative timeout", leadership.NewFlag().Store(s).Name("x").Timeout(-1), "Timeout"},
		{"negative poll", leadership.NewFlag().Store(s).Name("x").PollInterval(-1), "PollInterval"},
		{"negative jitter", leadership.NewFlag().Store(s).Name("x").Jitter(-1), "Jitter"},
		{"huge margin", leadership.NewFlag().Store(s).Name("x").SafetyMargin(10 * time.Second), "SafetyMargin"},
		{"renew too slow", leadership.NewFlag().Store(s).Name("x").RenewInterval(14 * time.Second), "RenewInterval"},
		{"timeout too long", leadership.NewFlag().Store(s).Name("x").Timeout(20 * time.Second), "Timeout"},
		{"negative hold", leadership.NewFlag().Store(s).Name("x").HoldAtLeast(-time.Second), "HoldAtLeast"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := tc.b.Build(context.Background())
			if err == nil {
				_ = f.Close()
				t.Fatal("Build accepted bad settings")
			}
			if !errors.Is(err, leadership.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Build error %q does not name %s or wrap ErrInvalidArgument", err, tc.field)
			}
		})
	}
}

func TestRaisedDoesNotAllocate(t *testing.T) {
	f := build(t, memstore.New(), "a")
	if n := testing.AllocsPerRun(1000, func() { _ = f.Raised() }); n != 0 {
		t.Fatalf("Raised allocates %v times per call", n)
	}
}

func BenchmarkRaised(b *testing.B) {
	f, err := leadership.NewFlag().Store(memstore.New()).Name("bench").Build(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.ReportAllocs()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			_ = f.Raised()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = f.Raised()
			}
		})
	})
}

// TestAFollowerWakesAtAFarExpiryPlusJitterWithNoPollOnTop checks issue
// 19's crash failover bound (lease + jitter): the holder renews, then
// crashes while the follower's last attempt saw an expiry several poll
// intervals away. The follower's polls on the way land before the expiry
// and its last wait ends at the expiry plus its jitter, never a poll
// interval later.
func TestAFollowerWakesAtAFarExpiryPlusJitterWithNoPollOnTop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		cut := faultstore.Wrap(s)
		a := build(t, cut, "a")
		jitter := testLease / 20
		poll := testLease / 7 // the expiry is 7 polls away at b's first attempt
		b := build(t, s, "b", func(b *leadership.FlagBuilder) {
			b.PollInterval(poll).Jitter(jitter).RandInt64NForTest(func(n int64) int64 { return n - 1 }) // the largest jitter
		})
		// a renews every Lease/3: at 10s/3; it crashes just after.
		time.Sleep(testLease/3 + time.Millisecond)
		cut.Fail(errors.New("crashed"))
		lastRenewal := time.Now().Add(-time.Millisecond)
		for !b.Raised() {
			time.Sleep(time.Millisecond)
		}
		if a.Raised() {
			t.Fatal("two leaders")
		}
		want := testLease + jitter
		if took := time.Since(lastRenewal); took < testLease || took > want+time.Millisecond {
			t.Fatalf("b raised %v after a's last renewal, want the lease plus the jitter, %v", took, want)
		}
	})
}
