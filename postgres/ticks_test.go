package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testdb"
)

// TestHoldersOfOneStoreRenewInFewBatches builds flags of one Store at
// instants spread over a RenewInterval, so that renewing RenewInterval
// after each reply would send one batch per flag and interval; the flags
// renew at the ticks they share instead, all due at one instant, and the
// store sends their renewals in a few batches per interval.
func TestHoldersOfOneStoreRenewInFewBatches(t *testing.T) {
	t.Parallel()
	s := newStore(t, newPool(t, schemaDSN(t, testdb.Postgres(t))))
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const (
		n     = 40
		lease = 3 * time.Second
		renew = lease / 3
	)
	prefix := randomHex()
	flags := make([]*leadership.Flag, n)
	for i := range flags {
		f, err := leadership.NewFlag().Store(s).Name(fmt.Sprintf("tick-%s-%02d", prefix, i)).Process("a").
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
		t.Fatalf("%d flags of one store renewed in %d statements and %d batches over %d renew intervals: want a few batches per interval, not one per flag",
			n, statements, batches, intervals)
	}
	t.Logf("%d flags over %d renew intervals: %d statements in %d batches", n, intervals, statements, batches)
}
