package leadership_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/memstore"
)

// sendTimes records when each flag's Acquire was called (the send), and
// answers after a fixed latency. It does not batch.
type sendTimes struct {
	leadership.Store
	latency time.Duration
	mu      sync.Mutex
	times   map[string][]time.Time
}

func newSendTimes(latency time.Duration) *sendTimes {
	return &sendTimes{Store: memstore.New(), latency: latency, times: map[string][]time.Time{}}
}

func (s *sendTimes) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	s.mu.Lock()
	s.times[req.Name] = append(s.times[req.Name], time.Now())
	s.mu.Unlock()
	time.Sleep(s.latency)
	return s.Store.Acquire(ctx, req)
}

func (s *sendTimes) of(name string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.times[name])
}

// batchingSendTimes says that it sends Acquires in batches of at most
// batch, as the postgres store does.
type batchingSendTimes struct {
	*sendTimes
	batch int
	ticks leadership.RenewalTicks
}

func newBatching(s *sendTimes, batch int) *batchingSendTimes {
	return &batchingSendTimes{sendTimes: s, batch: batch}
}

func (s *batchingSendTimes) MaxAcquireBatch() int { return s.batch }

func (s *batchingSendTimes) RenewalTicks() *leadership.RenewalTicks { return &s.ticks }

var _ leadership.AcquireBatcher = (*batchingSendTimes)(nil)

const tickLatency = 40 * time.Millisecond

// buildSpread builds a flag of each name on s, one every step, and lets
// them run for five leases.
func buildSpread(t *testing.T, s leadership.Store, step time.Duration, names ...string) {
	t.Helper()
	for _, name := range names {
		build(t, s, "a", func(b *leadership.FlagBuilder) { b.Name(name) })
		time.Sleep(step)
	}
	time.Sleep(5 * testLease)
}

// renewsWithin checks that the sends of the flag are at most renew apart
// and returns its renewals (the sends after the first).
func renewsWithin(t *testing.T, s *sendTimes, name string, renew time.Duration) []time.Time {
	t.Helper()
	sends := s.of(name)
	if len(sends) < 12 {
		t.Fatalf("flag %s sent %d attempts in five leases, want a renewal every %v", name, len(sends), renew)
	}
	for i := 1; i < len(sends); i++ {
		if gap := sends[i].Sub(sends[i-1]); gap > renew {
			t.Fatalf("flag %s renewed %v after its previous send (sends at %v), more than the RenewInterval %v",
				name, gap, sends, renew)
		}
	}
	return sends[1:]
}

func TestFlagsOfOneStoreRenewAtSharedTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSendTimes(tickLatency)
		store := newBatching(s, 512)
		renew := testLease / 3
		build(t, store, "a", func(b *leadership.FlagBuilder) { b.Name("one") })
		time.Sleep(1300 * time.Millisecond)
		// Another Timeout, the same RenewInterval: the same ticks.
		build(t, store, "a", func(b *leadership.FlagBuilder) { b.Name("two").Timeout(time.Second) })
		buildSpread(t, store, 0, "three")

		one := renewsWithin(t, s, "one", renew)
		for _, name := range []string{"two", "three"} {
			for _, at := range renewsWithin(t, s, name, renew) {
				if !slices.Contains(one, at) {
					t.Fatalf("flag %s renewed at %v, when flag one did not (one at %v, %s at %v)", name, at, one, name, s.of(name))
				}
			}
		}
	})
}

func TestFlagsOfALargeStoreRenewInGroupsOfHalfABatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSendTimes(tickLatency)
		renew := testLease / 3
		// Batches of 4: groups of 2 flags in the order they were built.
		buildSpread(t, newBatching(s, 4), 700*time.Millisecond, "g0a", "g0b", "g1a", "g1b", "g2a")
		groups := [][]string{{"g0a", "g0b"}, {"g1a", "g1b"}, {"g2a"}}
		var firsts [][]time.Time
		for _, group := range groups {
			first := renewsWithin(t, s, group[0], renew)
			for _, name := range group[1:] {
				for _, at := range renewsWithin(t, s, name, renew) {
					if !slices.Contains(first, at) {
						t.Fatalf("flag %s renewed at %v, when flag %s of its group did not (%v)", name, at, group[0], first)
					}
				}
			}
			for g, other := range firsts {
				for _, at := range first {
					if slices.Contains(other, at) {
						t.Fatalf("flag %s renewed at %v with flag %s of another group: groups must have ticks of their own", group[0], at, groups[g][0])
					}
				}
			}
			firsts = append(firsts, first)
		}
	})
}

func TestFlagsOfAStoreThatDoesNotBatchKeepTheirOwnSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSendTimes(tickLatency)
		renew := testLease / 3
		buildSpread(t, s, 1300*time.Millisecond, "one", "two")
		for _, name := range []string{"one", "two"} {
			sends := s.of(name)
			for i := 1; i < len(sends); i++ {
				if gap := sends[i].Sub(sends[i-1]); gap != renew+tickLatency {
					t.Fatalf("flag %s sent %v after its previous send, want RenewInterval %v after the reply", name, gap, renew)
				}
			}
		}
	})
}
