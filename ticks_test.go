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
// answers after a fixed latency.
type sendTimes struct {
	leadership.Store
	latency time.Duration
	mu      sync.Mutex
	times   map[string][]time.Time
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

func TestFlagsOfOneStoreRenewAtSharedTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const latency = 40 * time.Millisecond
		s := &sendTimes{Store: memstore.New(), latency: latency, times: map[string][]time.Time{}}
		renew := testLease / 3
		named := func(name string) func(*leadership.FlagBuilder) {
			return func(b *leadership.FlagBuilder) { b.Name(name) }
		}
		start := time.Now()
		build(t, s, "a", named("one"))
		time.Sleep(1300 * time.Millisecond)
		build(t, s, "a", named("two"))
		time.Sleep(2100 * time.Millisecond)
		build(t, s, "a", named("three"), func(b *leadership.FlagBuilder) { b.Timeout(time.Second) })
		time.Sleep(5 * testLease)

		one := s.of("one")
		for _, name := range []string{"one", "two", "three"} {
			sends := s.of(name)
			if len(sends) < 12 {
				t.Fatalf("flag %s sent %d attempts in five leases, want a renewal every %v", name, len(sends), renew)
			}
			for i := 1; i < len(sends); i++ {
				if gap := sends[i].Sub(sends[i-1]); gap > renew {
					t.Fatalf("flag %s renewed %v after its previous send (sends at %v after the start), more than the RenewInterval %v",
						name, gap, since(start, sends), renew)
				}
			}
			// From its first renewal on, each flag renews when the first
			// flag does.
			for _, at := range sends[1:] {
				if !slices.Contains(one, at) {
					t.Fatalf("flag %s renewed at %v, when flag one did not (one at %v, %s at %v after the start)",
						name, at.Sub(start), since(start, one), name, since(start, sends))
				}
			}
		}
	})
}

func since(start time.Time, ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(start)
	}
	return out
}
