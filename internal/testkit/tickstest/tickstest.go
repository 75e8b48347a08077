// Package tickstest checks, for the tests of a store that batches, that
// the holders of the flags of one Store renew at shared ticks: together,
// in a few batches per renew interval.
package tickstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// HoldersRenewInFewBatches builds flags named prefix-NN on s, a migrated
// store, at instants spread over a RenewInterval, so that renewing
// RenewInterval after each reply would send one batch per flag and
// interval; the flags renew at the ticks they share instead, all due at
// one instant, and the store must send their renewals in a few batches
// per interval. stats reports the batches and statements the store has
// sent.
func HoldersRenewInFewBatches(t *testing.T, s leadership.Store, prefix string, stats func() (batches, statements int64)) {
	t.Helper()
	const (
		n     = 40
		lease = 3 * time.Second
		renew = lease / 3
	)
	flags := make([]*leadership.Flag, n)
	for i := range flags {
		f, err := leadership.NewFlag().Store(s).Name(fmt.Sprintf("%s-%02d", prefix, i)).Process("a").
			Lease(lease).Migrate(false).Build(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		flags[i] = f
		time.Sleep(renew / n) // the next flag is acquired a fraction of an interval later
	}
	time.Sleep(renew + renew/2) // every flag has renewed once, at a tick
	b0, s0 := stats()
	const intervals = 3
	time.Sleep(intervals * renew)
	b1, s1 := stats()
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
