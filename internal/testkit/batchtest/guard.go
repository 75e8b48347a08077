package batchtest

import (
	"context"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// Guarded is a store with the failover guard, migrated on a database of
// the test's own.
type Guarded interface {
	leadership.Store
	leadership.Quarantiner
}

// CheckGuardRules walks the failover guard's rules (docs/failover.md)
// with the requests of many flags sent as one batch by send (a
// store's Send, through SendTogether): after a new incarnation
// (newIncarnation makes the store see one) the live holder renews at
// once, takeovers and first acquisitions in the same batch are refused
// for the hold, which lasts the longest lease of the batch, and then get
// versions at or above the floor. Two requests for one name in one batch
// are decided one after the other.
func CheckGuardRules(t testing.TB, s Guarded, send func(context.Context, ...leadership.Request) ([]leadership.Result, error), newIncarnation func()) {
	t.Helper()
	ctx := context.Background()
	// A live term that outlasts a release and a new incarnation on a
	// loaded server.
	const lease, longer = 3 * time.Second, 5 * time.Second
	together := func(reqs ...leadership.Request) []leadership.Result {
		t.Helper()
		res, err := send(ctx, reqs...)
		if err != nil {
			t.Fatalf("acquire together: %v", err)
		}
		return res
	}
	first := together(
		leadership.Request{Name: "live", Holder: "a", Lease: lease},
		leadership.Request{Name: "freed", Holder: "b", Lease: lease},
		leadership.Request{Name: "freed", Holder: "b2", Lease: lease}, // the same name again: loses to b
	)
	if !first[0].Acquired || first[0].Version != 1 || !first[1].Acquired || first[1].Version != 1 {
		t.Fatalf("first acquisitions on a fresh schema = %+v, want both at version 1", first)
	}
	if first[2].Acquired || first[2].Holder != "b" {
		t.Fatalf("a second request for a name in the same batch = %+v, want lost to b", first[2])
	}
	if ok, err := s.Release(ctx, "freed", "b", 1); err != nil || !ok {
		t.Fatalf("release = %v, %v", ok, err)
	}

	newIncarnation()
	after := together(
		leadership.Request{Name: "live", Holder: "a", Version: 1, Lease: lease},
		leadership.Request{Name: "freed", Holder: "c", Lease: lease},
		leadership.Request{Name: "new-name", Holder: "c", Lease: longer},
	)
	if !after[0].Acquired || after[0].Version != 1 {
		t.Fatalf("renewal by the live holder after a new incarnation = %+v, want renewed at once, version 1", after[0])
	}
	until, now, err := s.QuarantinedUntil(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The floor is the clock of the statement that noticed the new
	// incarnation: the batch's one clock, or in a store that reads the
	// clock per request (MySQL's statement mode), the first request's,
	// the earliest. The hold lasts the longest lease from it.
	floor := after[0].Now.UnixMicro()
	for _, res := range after[1:] {
		floor = min(floor, res.Now.UnixMicro())
	}
	if hold := until.Sub(time.UnixMicro(floor)); hold < longer-time.Second || hold > longer+time.Second {
		t.Fatalf("hold after a new incarnation ends %v after the batch's clock, want the longest lease of the batch (%v)", hold, longer)
	}
	for _, res := range after[1:] {
		if res.Acquired {
			t.Fatalf("acquisition of %s during the hold = %+v, want refused", res.Name, res)
		}
		if res.ExpiresAt.Before(until) {
			t.Errorf("a loser of %s was told the flag frees at %v, before the hold ends at %v", res.Name, res.ExpiresAt, until)
		}
	}
	time.Sleep(until.Sub(now) + 50*time.Millisecond)
	for _, res := range together(
		leadership.Request{Name: "freed", Holder: "c", Lease: lease},
		leadership.Request{Name: "new-name", Holder: "c", Lease: lease},
	) {
		if !res.Acquired || res.Version < floor {
			t.Fatalf("acquisition of %s after the hold = %+v, want a version at or above the floor %d", res.Name, res, floor)
		}
	}
}
