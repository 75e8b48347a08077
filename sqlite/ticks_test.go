package sqlite_test

import (
	"testing"

	"github.com/dbflag/leadership/internal/testkit/tickstest"
)

// TestHoldersOfOneStoreRenewInFewTransactions checks that the holders of
// the flags of one Store renew at shared ticks, committing their renewals
// in a few transactions per renew interval (tickstest).
func TestHoldersOfOneStoreRenewInFewTransactions(t *testing.T) {
	t.Parallel()
	s := openFile(t)
	tickstest.HoldersRenewInFewBatches(t, s, "tick", s.BatchStats)
}
