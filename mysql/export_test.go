package mysql

import (
	"context"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/batchtest"
)

// WatchStatements is the number of statements the store's waiters have
// sent.
func (s *Store) WatchStatements() int64 { return s.watchStatements.Load() }

// BellName is the name of the bell of holder in database db.
var BellName = bellName

// BatchStats reports how many batches and statements the store has sent.
func (s *Store) BatchStats() (batches, statements int64) {
	batches, statements, _ = s.batch.Stats()
	return batches, statements
}

// SetCallPerFlag makes the store send a batch as one CALL of
// leadership_acquire per request, as before leadership_acquire_many.
func (s *Store) SetCallPerFlag(on bool) { s.callPerFlag = on }

// AcquireTogether sends reqs as one batch, as the batcher sends requests
// that queued together (sorted by name), and returns their results in
// reqs' order.
func (s *Store) AcquireTogether(ctx context.Context, reqs ...leadership.Request) ([]leadership.Result, error) {
	return batchtest.SendTogether(ctx, s.sendBatch, reqs...)
}
