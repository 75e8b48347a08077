package postgres

import (
	"context"
	"math"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
	"github.com/dbflag/leadership/internal/testkit/batchtest"
)

// BatchStats reports how many batches and statements the store has sent.
func (s *Store) BatchStats() (batches, statements int64) {
	batches, statements, _ = s.acquires.Stats()
	return batches, statements
}

// AloneBatches reports how many batches the store sent from their caller's
// goroutine, without the hop to a sender goroutine.
func (s *Store) AloneBatches() int64 {
	_, _, alone := s.acquires.Stats()
	return alone
}

// SetStatementPerFlag makes the store send a batch as one statement per
// request, as before the statement that decides many.
func (s *Store) SetStatementPerFlag(on bool) { s.statementPerFlag = on }

// AcquireTogether sends reqs as one batch, as the batcher sends requests
// that queued together (sorted by name, runs of distinct names sent as
// one statement each), and returns their results in reqs' order.
func (s *Store) AcquireTogether(ctx context.Context, reqs ...leadership.Request) ([]leadership.Result, error) {
	return batchtest.SendTogether(ctx, s.acquires, reqs...)
}

// ReleaseStats reports how many batches and releases the store has sent.
func (s *Store) ReleaseStats() (batches, releases int64) {
	batches, releases, _ = s.releases.Stats()
	return batches, releases
}

// ReleaseTogether sends the releases reqs as one batch, as the batcher
// sends releases that queued together (sorted by name), and returns
// whether each ended its term, in reqs' order.
func (s *Store) ReleaseTogether(ctx context.Context, reqs ...sqlstore.Release) ([]bool, error) {
	return batchtest.SendTogether(ctx, s.releases, reqs...)
}

// SetReleaseOneByOne makes the store send each release on its own, at
// once, as before releases were batched: a test hook, for the benchmark
// that compares the two. Call it before the store's first Release.
func (s *Store) SetReleaseOneByOne() { s.releases.MaxBatch, s.releases.MaxSenders = 1, math.MaxInt }
