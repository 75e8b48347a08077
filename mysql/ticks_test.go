package mysql_test

import (
	"context"
	"testing"

	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/internal/testkit/tickstest"
	"github.com/dbflag/leadership/mysql"
)

// TestHoldersOfOneStoreRenewInFewBatches checks that the holders of the
// flags of one Store renew at shared ticks, sending their renewals in a
// few batches per renew interval (tickstest), in both modes.
func TestHoldersOfOneStoreRenewInFewBatches(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		s := newStore(t, openDB(t, freshDatabase(t, testdb.MySQL(t), nil)), opts...)
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		tickstest.HoldersRenewInFewBatches(t, s, "tick", s.BatchStats)
	})
}
