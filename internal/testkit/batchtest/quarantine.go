package batchtest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// Quarantined is a store with a failover guard.
type Quarantined interface {
	leadership.Store
	leadership.Quarantiner
}

// CheckQuarantineHoldsAWaitingTakeover checks that no new term starts
// after Quarantine has returned, even by an acquire statement that read
// the guard before the quarantine and then waited for a flag's row lock:
// a takeover of an expired row, whose lock lock(term) holds (a fenced
// transaction of the former term, stopped) until the function it returns
// is called, is sent by send, alone or together with a first acquisition
// of another name; the quarantine is asked while it waits; then the lock
// is let go. Either the takeover commits before Quarantine returns
// (Quarantine waited for it), or it starts no term. s and other are stores
// of one fresh schema (the quarantine holds all of it).
//
// The takeover cannot commit before the row lock is let go, so a
// Quarantine that returned before that did not wait for it, and the
// takeover must start no term. One that returned after it waited for
// something the takeover held: the two replies then come back on two
// connections at about the same time, in either order, so their order
// says nothing of the order of the commits, and is only logged.
func CheckQuarantineHoldsAWaitingTakeover(t testing.TB, s, other Quarantined, send func(context.Context, ...leadership.Request) ([]leadership.Result, error),
	lock func(leadership.Term) (unlock func()), together bool) {
	t.Helper()
	ctx := context.Background()
	// The longest lease is on record first: a statement that records a
	// longer one writes the guard, and that write alone would keep the
	// quarantine waiting.
	if res, err := s.Acquire(ctx, leadership.Request{Name: "warm", Holder: "a", Lease: time.Minute}); err != nil || !res.Acquired {
		t.Fatalf("Acquire warm = %+v, %v", res, err)
	}
	name := "locked"
	first, err := s.Acquire(ctx, leadership.Request{Name: name, Holder: "a", Lease: 300 * time.Millisecond})
	if err != nil || !first.Acquired {
		t.Fatalf("Acquire %s = %+v, %v", name, first, err)
	}
	unlock := lock(leadership.Term{Name: name, Holder: "a", Version: first.Version})
	defer unlock()
	time.Sleep(first.ExpiresAt.Sub(first.Now) + 50*time.Millisecond)

	var order atomic.Int64 // the order in which the two calls returned
	type outcome struct {
		results []leadership.Result
		err     error
		at      int64
	}
	took := make(chan outcome, 1)
	go func() {
		reqs := []leadership.Request{{Name: name, Holder: "b", Lease: time.Minute}}
		if together {
			reqs = append(reqs, leadership.Request{Name: "new", Holder: "b", Lease: time.Minute})
		}
		res, err := send(ctx, reqs...)
		took <- outcome{res, err, order.Add(1)}
	}()
	select {
	case o := <-took:
		t.Fatalf("the takeover did not wait for the row lock: %+v, %v", o.results, o.err)
	case <-time.After(time.Second):
	}
	type quarantine struct {
		until time.Time
		err   error
		at    int64
		// beforeUnlock: it returned before the row lock was let go
		beforeUnlock bool
	}
	held := make(chan quarantine, 1)
	var unlocked atomic.Bool
	go func() {
		until, err := other.Quarantine(ctx, time.Minute)
		held <- quarantine{until, err, order.Add(1), !unlocked.Load()}
	}()
	time.Sleep(time.Second) // time for the quarantine to commit, if it does not wait
	unlocked.Store(true)
	unlock()
	o, q := <-took, <-held
	if q.err != nil {
		t.Fatalf("Quarantine: %v", q.err)
	}
	if o.err != nil {
		t.Fatalf("the takeover: %v", o.err)
	}
	switch {
	case q.beforeUnlock:
		t.Logf("Quarantine returned before the row lock was let go; the acquire statement then: %+v", o.results)
	case o.at < q.at:
		t.Logf("Quarantine waited for the acquire statement, whose reply came first: %+v", o.results)
	default:
		t.Logf("Quarantine waited for the acquire statement, whose reply came second: %+v", o.results)
	}
	for i, res := range o.results {
		if res.Acquired && q.beforeUnlock {
			t.Errorf("request %d started a new term after Quarantine returned (before the row lock the takeover waited for was let go): %+v (quarantined until %v)", i, res, q.until)
		}
	}
}
