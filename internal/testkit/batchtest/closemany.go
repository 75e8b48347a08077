package batchtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// BenchmarkCloseMany measures a service's shutdown on a store that
// batches: n flags of one store (a process) lead, another store (a second
// process) has a follower of each, and the leading process closes all its
// flags at once, each Close from its own goroutine, as a service does when
// it stops. Each round reports close, the time from the first Close call
// to the last one returning (every flag released), and takeover, from the
// first Close call to the slowest follower raising. The roles then swap:
// the followers lead, and new followers are built on the store that
// closed (under a new process name), their release hint waited for.
//
// open returns a new, migrated store with its own pool; it is called
// twice. The flags have the default settings (lease 15 s; a follower
// polls at most every 2 s where release hints are not claimed, 15 s on
// PostgreSQL), so a handover that missed its hint shows as a poll.
// The metrics are the medians over the rounds of close (close-ms),
// first-takeover (first-takeover-ms) and takeover (takeover-ms), and the
// slowest round's takeover (max-takeover-ms).
func BenchmarkCloseMany(b *testing.B, n int, open func() leadership.Store, prefix string) {
	stores := [2]leadership.Store{open(), open()}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	process := 0
	// build builds a flag of each name on s, each raising at most once,
	// and returns them with the instants they raised at.
	build := func(s leadership.Store) ([]*leadership.Flag, []time.Time, *sync.Mutex) {
		b.Helper()
		process++
		flags := make([]*leadership.Flag, n)
		raised := make([]time.Time, n)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range names {
			wg.Go(func() {
				f, err := leadership.NewFlag().Store(s).Name(names[i]).Process(fmt.Sprintf("%s-p%d", prefix, process)).Migrate(false).
					OnRaise(func(context.Context) {
						mu.Lock()
						if raised[i].IsZero() {
							raised[i] = time.Now()
						}
						mu.Unlock()
					}).Build(context.Background())
				if err != nil {
					b.Errorf("Build %s: %v", names[i], err)
					return
				}
				flags[i] = f
			})
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		b.Cleanup(func() {
			for _, f := range flags {
				_ = f.Close()
			}
		})
		return flags, raised, &mu
	}
	lead, _, _ := build(stores[0])
	for _, f := range lead {
		if !f.Raised() {
			b.Fatalf("flag %s of the first process is not raised after Build", f.Name())
		}
	}
	follow, raised, mu := build(stores[1])
	waitForHint(b, stores[1])
	var closes, firsts, takeovers []time.Duration
	for side := 0; b.Loop(); side = 1 - side {
		start := time.Now()
		var wg sync.WaitGroup
		var last time.Time
		var lastMu sync.Mutex
		for _, f := range lead {
			wg.Go(func() {
				if err := f.Close(); err != nil {
					b.Errorf("Close %s: %v", f.Name(), err)
				}
				lastMu.Lock()
				if now := time.Now(); now.After(last) {
					last = now
				}
				lastMu.Unlock()
			})
		}
		wg.Wait()
		closes = append(closes, last.Sub(start))
		deadline := start.Add(30 * time.Second)
		for {
			mu.Lock()
			done := !slices.ContainsFunc(raised, time.Time.IsZero)
			first, slowest := slices.MinFunc(raised, time.Time.Compare), slices.MaxFunc(raised, time.Time.Compare)
			mu.Unlock()
			if done {
				firsts, takeovers = append(firsts, first.Sub(start)), append(takeovers, slowest.Sub(start))
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("round %d: not every follower raised within 30 s of Close", len(closes))
			}
			time.Sleep(200 * time.Microsecond)
		}
		b.StopTimer()
		lead = follow
		follow, raised, mu = build(stores[side])
		waitForHint(b, stores[side])
		b.StartTimer()
	}
	med := func(d []time.Duration) float64 {
		s := slices.Sorted(slices.Values(d))
		return float64(s[len(s)/2]) / 1e6
	}
	b.ReportMetric(med(closes), "close-ms")
	b.ReportMetric(med(firsts), "first-takeover-ms")
	b.ReportMetric(med(takeovers), "takeover-ms")
	b.ReportMetric(float64(slices.Max(takeovers))/1e6, "max-takeover-ms")
}

// waitForHint waits up to 10 s for s to report that releases by other
// processes reach its flags (NotifiesOtherProcesses on PostgreSQL,
// HintsOtherProcesses on MySQL and SQLite), so that a round measures the
// handover by notification, not by a poll.
func waitForHint(b testing.TB, s leadership.Store) {
	b.Helper()
	var reports func() bool
	switch h := s.(type) {
	case interface{ NotifiesOtherProcesses() bool }:
		reports = h.NotifiesOtherProcesses
	case interface{ HintsOtherProcesses() bool }:
		reports = h.HintsOtherProcesses
	default:
		return
	}
	for deadline := time.Now().Add(10 * time.Second); !reports(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("the followers' store reports no release hint after 10 s")
		}
	}
}
