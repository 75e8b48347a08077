package leadership_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/memstore"
)

// noisyStore is a store whose release notifications the test sends itself,
// as anyone who can NOTIFY can, and which counts the attempts.
type noisyStore struct {
	leadership.Store
	wake     chan struct{}
	attempts atomic.Int64
}

func newNoisyStore(inner leadership.Store) *noisyStore {
	return &noisyStore{Store: inner, wake: make(chan struct{}, 1)}
}

func (s *noisyStore) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	s.attempts.Add(1)
	return s.Store.Acquire(ctx, req)
}

func (s *noisyStore) NotifyReleases(string) (<-chan struct{}, func()) { return s.wake, func() {} }

// notify sends a notification, dropped while one is pending, as a store's
// hub does.
func (s *noisyStore) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// wakeGap is Lease/20 at testLease.
const wakeGap = testLease / 20

// follower builds a leader "a" on s and a follower "b" on a noisy wrapper
// of s whose poll never comes first, and returns the wrapper once the
// follower's first attempts are over.
func follower(t *testing.T) *noisyStore {
	t.Helper()
	s := memstore.New()
	build(t, s, "a")
	noisy := newNoisyStore(s)
	b := build(t, noisy, "b", func(b *leadership.FlagBuilder) { b.PollInterval(time.Hour) })
	if b.Raised() {
		t.Fatal("the follower raised while a leads")
	}
	time.Sleep(wakeGap) // past any gap
	synctest.Wait()
	return noisy
}

// TestAFloodOfNotificationsCostsAFollowerOneAttemptPerWakeGap sends a
// follower 200 notifications spread over one lease, while the row stays
// held: each would have brought an attempt; coalesced, the flood brings at
// most one per Lease/20.
func TestAFloodOfNotificationsCostsAFollowerOneAttemptPerWakeGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := follower(t)
		before := s.attempts.Load()
		const n = 200
		for range n {
			s.notify()
			time.Sleep(testLease / n)
			synctest.Wait()
		}
		// The follower's own attempts at the holder's expiry: one per
		// lease at most.
		extra := s.attempts.Load() - before
		if limit := int64(testLease/wakeGap) + 2; extra > limit {
			t.Errorf("%d notifications in a lease brought %d attempts, want at most %d: one per %v", n, extra, limit, wakeGap)
		}
		t.Logf("%d notifications in a lease: %d attempts", n, extra)
	})
}

// TestANotificationAfterAQuietGapWakesAFollowerAtOnce, and one within the
// gap after it brings an attempt at the end of the gap: coalesced, not
// lost.
func TestANotificationAfterAQuietGapWakesAFollowerAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := follower(t)
		before := s.attempts.Load()
		s.notify()
		synctest.Wait()
		if got := s.attempts.Load() - before; got != 1 {
			t.Fatalf("a notification after a quiet gap brought %d attempts at once, want 1", got)
		}
		time.Sleep(wakeGap / 4)
		s.notify()
		synctest.Wait()
		if got := s.attempts.Load() - before; got != 1 {
			t.Fatalf("a notification within the gap brought an attempt at once (%d in all), want it at the end of the gap", got)
		}
		time.Sleep(wakeGap*3/4 - time.Nanosecond)
		synctest.Wait()
		if got := s.attempts.Load() - before; got != 1 {
			t.Fatalf("%d attempts before the gap ended, want 1", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := s.attempts.Load() - before; got != 2 {
			t.Fatalf("%d attempts at the end of the gap, want 2: the coalesced notification's", got)
		}
	})
}
