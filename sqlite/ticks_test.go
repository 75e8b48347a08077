package sqlite_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// TestHoldersOfOneStoreRenewInFewTransactions builds flags of one Store at
// instants spread over a RenewInterval, so that renewing RenewInterval
// after each reply would commit one transaction per flag and interval;
// the flags renew at the ticks they share instead, all due at one
// instant, and the store commits their renewals in a few transactions per
// interval.
func TestHoldersOfOneStoreRenewInFewTransactions(t *testing.T) {
	t.Parallel()
	s := openFile(t)
	ctx := context.Background()
	const (
		n     = 40
		lease = 3 * time.Second
		renew = lease / 3
	)
	flags := make([]*leadership.Flag, n)
	for i := range flags {
		f, err := leadership.NewFlag().Store(s).Name(fmt.Sprintf("tick-%02d", i)).Process("a").
			Lease(lease).Migrate(false).Build(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		flags[i] = f
		time.Sleep(renew / n) // the next flag is acquired a fraction of an interval later
	}
	time.Sleep(renew + renew/2) // every flag has renewed once, at a tick
	b0, s0 := s.BatchStats()
	const intervals = 3
	time.Sleep(intervals * renew)
	b1, s1 := s.BatchStats()
	batches, statements := b1-b0, s1-s0
	for i, f := range flags {
		if !f.Raised() {
			t.Fatalf("flag %d is not raised: its renewals failed", i)
		}
	}
	if statements < (intervals-1)*n {
		t.Fatalf("%d statements in %d renew intervals of %d flags, want about one renewal per flag and interval", statements, intervals, n)
	}
	if batches > statements/4 {
		t.Fatalf("%d flags of one store renewed in %d statements and %d transactions over %d renew intervals: want a few transactions per interval, not one per flag",
			n, statements, batches, intervals)
	}
	t.Logf("%d flags over %d renew intervals: %d statements in %d transactions", n, intervals, statements, batches)
}
