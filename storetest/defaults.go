package storetest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// runDefaults checks a flag built with every optional setting at its
// default: the poll interval it chose for this store, and a graceful
// handover between two processes with it. The poll interval is Lease/3,
// capped at 2 s, or Lease (both as documented on
// [leadership.FlagBuilder.PollInterval]) when the store can notify other
// processes (it has the method
// NotifiesOtherProcesses of [leadership.ReleaseNotifier]). When the
// follower's store then reports that its notifications arrive, the
// handover must come from the notification, well before the next poll;
// when it does not, within the capped poll interval. A store whose
// notifications carry releases to other processes as a hint it does not
// claim (it has the method HintsOtherProcesses, see [Hinter], reporting
// true) must hand over well before the capped poll too. A store whose
// notifications or hints arrive then hands over back the same way, to a
// new flag on the first store.
//
// It runs twice: with a process name per store, as each store stands for
// a process; and with the default name, one per process, on both stores,
// as for two stores of one process.
func runDefaults(t *testing.T, open Open) {
	for _, oneProcess := range []bool{false, true} {
		test := "DefaultSettingsHandOver"
		if oneProcess {
			test += "BetweenStoresOfOneProcess"
		}
		t.Run(test, func(t *testing.T) {
			t.Parallel()
			checkDefaults(t, open, oneProcess)
		})
	}
}

// checkDefaults is runDefaults' test, with the default process name on
// every store when oneProcess.
func checkDefaults(t *testing.T, open Open, oneProcess bool) {
	store := open(t)
	_, canNotify := store.(interface{ NotifiesOtherProcesses() bool })
	const maxPoll = 2 * time.Second
	wantPoll := min(leadership.DefaultLease/3, maxPoll)
	if canNotify {
		wantPoll = leadership.DefaultLease
	}

	mon := newMonitor(t)
	name := uniqueName(t)
	build := func(s leadership.Store) *leadership.Flag {
		t.Helper()
		connect(t, s)
		log := &startLog{}
		b := leadership.NewFlag().Store(s).Name(name).Logger(slog.New(log))
		if !oneProcess {
			b = b.Process(mon.process(s))
		}
		f := mon.watch(t, b)
		if got := log.pollInterval(); got != wantPoll {
			t.Fatalf("default poll interval = %v, want %v (store can notify other processes: %v)", got, wantPoll, canNotify)
		}
		return f
	}
	leader := build(store)
	mon.waitForLeader(t, slack)
	followerStore := open(t)
	follower := build(followerStore)
	if follower.Raised() {
		t.Fatal("the second flag raised while the first leads")
	}
	time.Sleep(300 * time.Millisecond) // the follower now waits out its poll
	crossProcess := notifiesWithin(followerStore, 10*time.Second)
	poll := wantPoll
	if !crossProcess {
		poll = min(poll, maxPoll)
	}
	hinted := !crossProcess && hintsWithin(followerStore, 5*time.Second)
	pushed := crossProcess || hinted
	// The handover is timed from Close's return, when the release has
	// committed and its notification has gone out: on a loaded machine
	// Close itself, waiting for SQLite's write lock, took 300 ms.
	closed := time.Now()
	if err := leader.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	released := time.Now()
	mon.waitForLeader(t, poll+leadership.DefaultLease/20+slack)
	took := time.Since(released)
	t.Logf("graceful handover at the default settings took %v after Close returned, Close %v (poll interval %v, store notifies other processes: %v, hints them: %v)", took, released.Sub(closed), poll, crossProcess, hinted)
	if pushed && took > poll/5 {
		t.Errorf("graceful handover took %v after Close returned; the release notification should have woken the follower well before its poll interval %v", took, poll)
	}
	if !pushed {
		return
	}
	// Back the other way, to a new flag on the first store, whose
	// notifications stopped with its last flag and start again: each
	// "process" of a store that claims notifications both sends and
	// receives them.
	back := build(store)
	if crossProcess && !notifiesWithin(store, 10*time.Second) {
		t.Fatal("the first store no longer reports that its notifications reach it after its flags were closed and a new one built")
	}
	if hinted && !hintsWithin(store, 5*time.Second) {
		t.Fatal("the first store no longer reports that releases of other processes wake it after its flags were closed and a new one built")
	}
	time.Sleep(300 * time.Millisecond)
	if err := follower.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	released = time.Now()
	if got := mon.waitForLeader(t, poll+leadership.DefaultLease/20+slack, follower); got != back {
		t.Fatal("another flag than the new one on the first store took over")
	}
	took = time.Since(released)
	t.Logf("graceful handover back to the first store took %v after Close returned", took)
	if took > poll/5 {
		t.Errorf("graceful handover back took %v after Close returned; the release notification should have woken the follower well before its poll interval %v", took, poll)
	}
}

// notifiesWithin waits up to limit for store to report that its release
// notifications reach other processes, and reports whether it did.
func notifiesWithin(store leadership.Store, limit time.Duration) bool {
	n, ok := store.(interface{ NotifiesOtherProcesses() bool })
	return ok && trueWithin(n.NotifiesOtherProcesses, limit)
}

// trueWithin polls report every 20 ms for up to limit and reports whether
// it turned true.
func trueWithin(report func() bool, limit time.Duration) bool {
	for deadline := time.Now().Add(limit); !report(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// Hinter is implemented by stores whose release notifications also carry
// releases by other processes, as a hint they do not claim (they have no
// NotifiesOtherProcesses method, or it reports false): the mysql store
// (user-level locks; see its package documentation) and, on Linux, the
// sqlite store (a file watcher). Flags do not use it; the suite checks with it that a graceful
// handover between processes comes well before the follower's poll.
type Hinter interface {
	// HintsOtherProcesses reports whether releases by other processes
	// wake this store's flags now: its watcher (sqlite) or a waiter on a
	// holder's bell (mysql) runs.
	HintsOtherProcesses() bool
}

// hintsWithin waits up to limit for store to report that releases by
// other processes wake its flags, and reports whether it did.
func hintsWithin(store leadership.Store, limit time.Duration) bool {
	h, ok := store.(Hinter)
	return ok && trueWithin(h.HintsOtherProcesses, limit)
}

// startLog is a slog.Handler that keeps the "flag starting" record a flag
// logs at Debug level with its effective settings.
type startLog struct {
	mu   sync.Mutex
	poll time.Duration
}

func (h *startLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *startLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *startLog) WithGroup(string) slog.Handler            { return h }

func (h *startLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "flag starting" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "poll_interval" {
			h.mu.Lock()
			h.poll = a.Value.Duration()
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

// pollInterval is the poll interval the flag logged, or 0 if it logged
// none.
func (h *startLog) pollInterval() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.poll
}
