package postgres

import (
	"context"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/batchtest"
)

// BatchStats reports how many batches and statements the store has sent.
func (s *Store) BatchStats() (batches, statements int64) {
	batches, statements, _ = s.batch.Stats()
	return batches, statements
}

// AloneBatches reports how many batches the store sent from their caller's
// goroutine, without the hop to a sender goroutine.
func (s *Store) AloneBatches() int64 {
	_, _, alone := s.batch.Stats()
	return alone
}

// SetStatementPerFlag makes the store send a batch as one statement per
// request, as before the statement that decides many.
func (s *Store) SetStatementPerFlag(on bool) { s.statementPerFlag = on }

// AcquireTogether sends reqs as one batch, as the batcher sends requests
// that queued together (sorted by name, runs of distinct names sent as
// one statement each), and returns their results in reqs' order.
func (s *Store) AcquireTogether(ctx context.Context, reqs ...leadership.Request) ([]leadership.Result, error) {
	return batchtest.SendTogether(ctx, s.sendBatch, reqs...)
}
