package batchtest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// CheckPoisonedNeighbour checks a row at the largest version, math.MaxInt64
// (setVersion writes it by hand, as a careless operator or a hostile peer
// might): its current term still renews and releases; an attempt that
// would start a new term on it fails alone, with an error naming the flag,
// while the other requests of its batch (first acquisitions and takeovers
// of released rows) are decided as usual, both in one batch sent by send
// and through s's Acquire called from many goroutines at once. Names start
// with prefix.
func CheckPoisonedNeighbour(t testing.TB, s leadership.Store, send func(context.Context, ...leadership.Request) ([]leadership.Result, error),
	setVersion func(name string, version int64), prefix string) {
	t.Helper()
	ctx := context.Background()
	poisoned := prefix + "poisoned"
	first, err := s.Acquire(ctx, leadership.Request{Name: poisoned, Holder: "h", Lease: time.Minute})
	if err != nil || !first.Acquired {
		t.Fatalf("Acquire %s = %+v, %v", poisoned, first, err)
	}
	setVersion(poisoned, math.MaxInt64)
	renewed, err := s.Acquire(ctx, leadership.Request{Name: poisoned, Holder: "h", Version: math.MaxInt64, Lease: time.Minute})
	if err != nil || !renewed.Acquired || renewed.Version != math.MaxInt64 {
		t.Fatalf("renewal of the term at the largest version = %+v, %v; want renewed", renewed, err)
	}
	if ok, err := s.Release(ctx, poisoned, "h", math.MaxInt64); err != nil || !ok {
		t.Fatalf("release of the term at the largest version = %v, %v; want released", ok, err)
	}

	// Neighbours: names never acquired, and rows released (a takeover,
	// the poisoned row's own path).
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprintf("%snew-%02d", prefix, i))
	}
	for i := range 40 {
		n := fmt.Sprintf("%sfreed-%02d", prefix, i)
		res, err := s.Acquire(ctx, leadership.Request{Name: n, Holder: "h", Lease: time.Minute})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire %s = %+v, %v", n, res, err)
		}
		if ok, err := s.Release(ctx, n, "h", res.Version); err != nil || !ok {
			t.Fatalf("Release %s = %v, %v", n, ok, err)
		}
		names = append(names, n)
	}

	// One batch.
	reqs := []leadership.Request{{Name: poisoned, Holder: "b", Lease: time.Minute}}
	for _, n := range names {
		reqs = append(reqs, leadership.Request{Name: n, Holder: "b", Lease: time.Minute})
	}
	results, err := send(ctx, reqs...)
	if err != nil {
		t.Fatalf("a batch with a row at the largest version failed whole: %v", err)
	}
	if res := results[0]; res.Acquired || res.Version != math.MaxInt64 {
		t.Errorf("the attempt on the row at the largest version = %+v, want it lost at version %d", res, int64(math.MaxInt64))
	}
	versions := map[string]int64{}
	for i, res := range results[1:] {
		if !res.Acquired || res.Holder != "b" {
			t.Errorf("%s, batched with the row at the largest version = %+v, want acquired by b", reqs[i+1].Name, res)
		}
		versions[reqs[i+1].Name] = res.Version
	}

	// Through Acquire, from many goroutines released at once, in rounds:
	// the batcher's error for the poisoned row only.
	for _, n := range names {
		if ok, err := s.Release(ctx, n, "b", versions[n]); err != nil || !ok {
			t.Fatalf("Release %s = %v, %v", n, ok, err)
		}
	}
	names = slices.Insert(names, len(names)/2, poisoned)
	for round := range 3 {
		holder := fmt.Sprintf("c%d", round)
		errs := make([]error, len(names))
		got := make([]leadership.Result, len(names))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, n := range names {
			wg.Go(func() {
				<-start
				got[i], errs[i] = s.Acquire(ctx, leadership.Request{Name: n, Holder: holder, Lease: time.Minute})
			})
		}
		close(start)
		wg.Wait()
		for i, n := range names {
			switch {
			case n == poisoned:
				if errs[i] == nil || !strings.Contains(errs[i].Error(), strconv.Quote(poisoned)) || !strings.Contains(errs[i].Error(), "9223372036854775807") {
					t.Errorf("round %d: Acquire of the row at the largest version = %+v, %v; want an error naming the flag and the version", round, got[i], errs[i])
				}
			case errs[i] != nil || !got[i].Acquired:
				t.Errorf("round %d: Acquire %s, alongside the row at the largest version = %+v, %v; want acquired", round, n, got[i], errs[i])
			default:
				if ok, err := s.Release(ctx, n, holder, got[i].Version); err != nil || !ok {
					t.Fatalf("Release %s = %v, %v", n, ok, err)
				}
			}
		}
	}
}
