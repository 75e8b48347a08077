package postgres_test

import (
	"context"
	"testing"

	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/internal/testkit/tickstest"
)

// TestHoldersOfOneStoreRenewInFewBatches checks that the holders of the
// flags of one Store renew at shared ticks, sending their renewals in a
// few batches per renew interval (tickstest).
func TestHoldersOfOneStoreRenewInFewBatches(t *testing.T) {
	t.Parallel()
	s := newStore(t, newPool(t, schemaDSN(t, testdb.Postgres(t))))
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	tickstest.HoldersRenewInFewBatches(t, s, "tick-"+randomHex(), s.BatchStats)
}
