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
// capped at 2 s (both as documented on [leadership.FlagBuilder.PollInterval])
// unless the store's release notifications reach other processes (it has
// the method NotifiesOtherProcesses of [leadership.ReleaseNotifier]
// reporting true); there the handover must come from the notification,
// well before the next poll.
func runDefaults(t *testing.T, open Open) {
	t.Run("DefaultSettingsHandOver", func(t *testing.T) {
		t.Parallel()
		store := open(t)
		n, ok := store.(interface{ NotifiesOtherProcesses() bool })
		crossProcess := ok && n.NotifiesOtherProcesses()
		wantPoll := min(leadership.DefaultLease/3, 2*time.Second)
		if crossProcess {
			wantPoll = leadership.DefaultLease / 3
		}

		mon := newMonitor(t)
		name := uniqueName(t)
		build := func(s leadership.Store) *leadership.Flag {
			t.Helper()
			connect(t, s)
			log := &startLog{}
			f := mon.watch(t, leadership.NewFlag().Store(s).Name(name).Logger(slog.New(log)))
			if got := log.pollInterval(); got != wantPoll {
				t.Fatalf("default poll interval = %v, want %v (store notifies other processes: %v)", got, wantPoll, crossProcess)
			}
			return f
		}
		leader := build(store)
		mon.waitForLeader(t, slack)
		follower := build(open(t))
		if follower.Raised() {
			t.Fatal("the second flag raised while the first leads")
		}
		time.Sleep(300 * time.Millisecond) // the follower now waits out its poll
		closed := time.Now()
		if err := leader.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		mon.waitForLeader(t, wantPoll+leadership.DefaultLease/20+slack)
		took := time.Since(closed)
		t.Logf("graceful handover at the default settings took %v (poll interval %v, store notifies other processes: %v)", took, wantPoll, crossProcess)
		if crossProcess && took > wantPoll/5 {
			t.Errorf("graceful handover took %v; the release notification should have woken the follower well before its poll interval %v", took, wantPoll)
		}
	})
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
