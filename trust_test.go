package leadership_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/dbflag/leadership/internal/testkit/faultstore"
	"github.com/dbflag/leadership/memstore"
)

// TestTrustDeadlineIsWhereRaisedEnds: TrustDeadline is the send instant of
// the last winning statement plus Lease − SafetyMargin, moves later at each
// renewal, and is the instant Raised turns false when renewals stop.
func TestTrustDeadlineIsWhereRaisedEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stall := faultstore.Wrap(memstore.New())
		sentAt := time.Now() // Build sends the first acquisition now
		a := build(t, stall, "a")
		window := testLease - testLease/10
		if d, ok := a.TrustDeadline(); !ok || !d.Equal(sentAt.Add(window)) {
			t.Fatalf("after Build TrustDeadline = %v, %v; want %v, true", d, ok, sentAt.Add(window))
		}
		time.Sleep(testLease / 3) // the first renewal is sent now
		renewedAt := time.Now()
		synctest.Wait()
		if d, ok := a.TrustDeadline(); !ok || !d.Equal(renewedAt.Add(window)) {
			t.Fatalf("after a renewal TrustDeadline = %v, %v; want %v, true", d, ok, renewedAt.Add(window))
		}
		resume := stall.Hang()
		defer resume()
		d, _ := a.TrustDeadline()
		time.Sleep(time.Until(d) - time.Nanosecond)
		if !a.Raised() {
			t.Fatal("lowered before TrustDeadline")
		}
		time.Sleep(time.Nanosecond)
		if a.Raised() {
			t.Fatal("still raised at TrustDeadline")
		}
		synctest.Wait()
		if d, ok := a.TrustDeadline(); ok {
			t.Fatalf("lowered flag: TrustDeadline = %v, true; want false", d)
		}
	})
}
