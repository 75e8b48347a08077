//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/memstore"
)

// TestTheWatchdogRefusesAnExtensionPastItsDeadline: an extension read after
// the end of the trust window (from a starved run, or for a later term)
// does not revive the tree: the watchdog stops it for the deadline it
// had, and reports how late it is.
func TestTheWatchdogRefusesAnExtensionPastItsDeadline(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	deadline := monoNow() - int64(time.Second)
	// The command is gone and grace is 0: stop sends no signal.
	w := &watchdog{margin: int64(100 * time.Millisecond), log: slog.New(slog.NewTextHandler(&logs, nil)),
		started: true, cmdDone: true, deadline: deadline}
	w.handle(fmt.Sprintf("deadline %d", monoNow()+int64(time.Minute)))
	if w.deadline != deadline || !w.stopping || w.cause != causeDeadline || !w.late {
		t.Fatalf("after a late extension: deadline moved %v, stopping %v, cause %q, late %v; want the old deadline, stopping for it, late",
			time.Duration(w.deadline-deadline), w.stopping, w.cause, w.late)
	}
	if !strings.Contains(logs.String(), "later than") {
		t.Fatalf("no error logged:\n%s", logs.String())
	}
}

// TestTheWatchdogReportsLatenessBeyondHalfTheMargin: the margin between
// SIGKILL and the earliest expiry also absorbs clock-rate drift, so the
// watchdog reports itself late beyond half of it (docs/cli.md).
func TestTheWatchdogReportsLatenessBeyondHalfTheMargin(t *testing.T) {
	t.Parallel()
	margin := 100 * time.Millisecond
	for _, tc := range []struct {
		late time.Duration
		want bool
	}{{margin / 2, false}, {margin/2 + time.Millisecond, true}, {margin, true}} {
		w := &watchdog{margin: int64(margin), log: slog.New(slog.DiscardHandler)}
		if w.lateBy("test", int64(tc.late)); w.late != tc.want {
			t.Errorf("late by %v with a margin of %v: reported %v, want %v", tc.late, margin, w.late, tc.want)
		}
	}
}

// TestRunHandsTheWatchdogNoDeadlineOfAnotherTerm: when run reads the trust
// deadline after the command's term ended and a new one began (its tick
// chosen before the end of the term), it tells the watchdog nothing: the
// new term's deadline is not the command's.
func TestRunHandsTheWatchdogNoDeadlineOfAnotherTerm(t *testing.T) {
	t.Parallel()
	var ahead atomic.Int64 // the database clock's lead on this process's
	store := memstore.New(memstore.WithClock(func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }))
	ctx := context.Background()
	const lease = 2 * time.Second
	f, err := leadership.NewFlag().Store(store).Name("job").Process("host").Lease(lease).RenewInterval(lease / 20).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	token, ok := f.Token()
	if !ok {
		t.Fatal("the flag is not raised after Build")
	}
	if d, ok := termDeadline(f, token); !ok || d.IsZero() {
		t.Fatalf("termDeadline of the term leading = %v, %v", d, ok)
	}
	// The term ends and, the evicted row having expired, the next attempt
	// starts a new one.
	if _, err := store.Evict(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	ahead.Store(int64(2 * lease))
	waitFor(t, 10*time.Second, "a new term", func() bool { v, ok := f.Token(); return ok && v != token })
	if d, ok := termDeadline(f, token); ok {
		next, _ := f.Token()
		t.Fatalf("termDeadline of term %d, after term %d began, = %v, true: the watchdog of term %d would be given term %d's deadline",
			token, next, time.Until(d).Round(time.Millisecond), token, next)
	}
}
