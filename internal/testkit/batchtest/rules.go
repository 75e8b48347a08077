package batchtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// CheckRules sends the attempts of 400 flags of two stores, a and b (two
// processes on one migrated database), at once, so that they travel in
// batches, and checks every rule of the contract per row: first
// acquisitions win at version 1, the other process loses each name and
// learns its holder, renewals keep the version, two requests of one store
// for one name in one burst make one winner, and takeovers after expiry
// increase the version by one. Names start with prefix. stats reports b's
// batches and statements: the test fails unless its bursts were batched.
func CheckRules(t testing.TB, a, b leadership.Store, prefix string, stats func() (batches, statements int64)) {
	t.Helper()
	const n = 400
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	burst := func(s leadership.Store, holder string, version func(i int) int64, lease time.Duration) []leadership.Result {
		t.Helper()
		out := make([]leadership.Result, n)
		var wg sync.WaitGroup
		for i := range names {
			wg.Go(func() {
				res, err := s.Acquire(context.Background(), leadership.Request{Name: names[i], Holder: holder, Version: version(i), Lease: lease})
				if err != nil {
					t.Errorf("acquire %s: %v", names[i], err)
				}
				out[i] = res
			})
		}
		wg.Wait()
		return out
	}
	zero := func(int) int64 { return 0 }
	// Long leases until the renewal, which shortens them: a burst of 400
	// attempts may take longer than a short lease on a loaded machine,
	// and b's attempts must find every term unexpired.
	const long, short = time.Minute, 300 * time.Millisecond
	for i, res := range burst(a, "a", zero, long) {
		if !res.Acquired || res.Version != 1 || res.Holder != "a" {
			t.Fatalf("first acquisition of %s = %+v, want a at version 1", names[i], res)
		}
	}
	for i, res := range burst(b, "b", zero, long) {
		if res.Acquired || res.Holder != "a" || res.Version != 1 || !res.ExpiresAt.After(res.Now) {
			t.Fatalf("attempt of another process on %s = %+v, want lost to a, version 1, unexpired", names[i], res)
		}
	}
	first := burst(a, "a", func(int) int64 { return 1 }, short)
	for i, res := range first {
		if !res.Acquired || res.Version != 1 {
			t.Fatalf("renewal of %s = %+v, want renewed at version 1", names[i], res)
		}
	}
	time.Sleep(2 * short) // every renewed term has expired
	// Two requests per name at once on one store: one wins.
	var wg sync.WaitGroup
	results := make([][2]leadership.Result, n)
	for i := range names {
		for j, holder := range []string{"b1", "b2"} {
			wg.Go(func() {
				res, err := b.Acquire(context.Background(), leadership.Request{Name: names[i], Holder: holder, Lease: time.Minute})
				if err != nil {
					t.Errorf("takeover of %s: %v", names[i], err)
				}
				results[i][j] = res
			})
		}
	}
	wg.Wait()
	for i, r := range results {
		if r[0].Acquired == r[1].Acquired {
			t.Fatalf("takeover of %s by two requests of one store: %+v and %+v, want exactly one winner", names[i], r[0], r[1])
		}
		won := r[0]
		if r[1].Acquired {
			won = r[1]
		}
		if won.Version != 2 {
			t.Fatalf("takeover of %s at version %d, want 2", names[i], won.Version)
		}
	}
	batches, statements := stats()
	if batches >= statements {
		t.Fatalf("store b sent %d statements in %d batches: the bursts were never batched", statements, batches)
	}
	t.Logf("store b: %d statements in %d batches", statements, batches)
}
