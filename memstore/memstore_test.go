package memstore_test

import (
	"testing"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/memstore"
	"github.com/dbflag/leadership/storetest"
)

// TestConformance shows that the in-memory store, on which the algorithm's
// unit tests and simulations run, obeys the same contract as the database
// stores.
func TestConformance(t *testing.T) {
	s := memstore.New()
	storetest.Run(t, func(testing.TB) leadership.Store { return s })
}
