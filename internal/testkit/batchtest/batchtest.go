// Package batchtest has the helpers that the tests and benchmarks of the
// stores that batch (postgres, mysql, sqlite) share: many flags of one
// Store acquired, then renewed all at once so that their renewals travel
// in batches; the contract's rules, the failover guard's rules and names
// that need quoting, checked on requests sent as one batch.
package batchtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// Holder and Lease are what AcquireAll and RenewAll ask for.
const (
	Holder = "h"
	Lease  = time.Minute
)

// AcquireAll has s acquire names, one after the other, and returns their
// terms; it fails the test unless each is acquired.
func AcquireAll(t testing.TB, s leadership.Store, names []string) []leadership.Result {
	t.Helper()
	terms := make([]leadership.Result, len(names))
	for i, n := range names {
		res, err := s.Acquire(context.Background(), leadership.Request{Name: n, Holder: Holder, Lease: Lease})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire %s = %+v, %v", n, res, err)
		}
		terms[i] = res
	}
	return terms
}

// RenewAll renews the terms of names from one goroutine per name, rounds
// times, and fails the test unless each renews its own term.
func RenewAll(t testing.TB, s leadership.Store, names []string, terms []leadership.Result, rounds int) {
	t.Helper()
	ctx := context.Background()
	for range rounds {
		var wg sync.WaitGroup
		errs := make([]error, len(names))
		for i, n := range names {
			wg.Go(func() {
				res, err := s.Acquire(ctx, leadership.Request{Name: n, Holder: Holder, Version: terms[i].Version, Lease: Lease})
				switch {
				case err != nil:
					errs[i] = err
				case !res.Acquired || res.Version != terms[i].Version || res.Holder != Holder:
					errs[i] = fmt.Errorf("renewal of %s = %+v, want the term %d renewed", n, res, terms[i].Version)
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// BenchmarkRenewals has s, a migrated store, acquire 512 flags named
// prefix-NNN, then renews them all at once at each round of b.Loop, and
// reports ns/renewal (the wall time per renewal) and renewals/batch (the
// mean batch size, from stats: the store's batches and statements sent).
func BenchmarkRenewals(b *testing.B, s leadership.Store, prefix string, stats func() (batches, statements int64)) {
	names := make([]string, 512)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	terms := AcquireAll(b, s, names)
	batches0, statements0 := stats()
	rounds := 0
	for b.Loop() {
		rounds++
		RenewAll(b, s, names, terms, 1)
	}
	batches, statements := stats()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rounds*len(names)), "ns/renewal")
	b.ReportMetric(float64(statements-statements0)/float64(batches-batches0), "renewals/batch")
}
