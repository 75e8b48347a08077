package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// Batching (sqlstore.Batcher). The acquire requests of the flags of one
// Store that are due while another batch is on its way are sent together:
// one statement (acquireManySQL) decides all of them, one row each, or,
// when a name comes twice, one statement per run of distinct names (see
// distinctRuns), the runs sent as one pgx batch. Either way one round trip
// and one implicit transaction (so one commit) for all of them. A batch of one
// is acquireSQL alone, without a batch's framing, and so is a run of one.
// The session must be idle afterwards (see committed), so the batch has
// committed before any result is returned.
const (
	// maxSenders is how many batches of one Store may be in flight at once.
	maxSenders = 2
	// maxBatch is the most requests in one batch.
	maxBatch = 512
)

// newBatcher returns the batcher of s.
func (s *Store) newBatcher() *sqlstore.Batcher {
	return &sqlstore.Batcher{
		Send:       s.sendBatch,
		Describe:   func(name string, err error) error { return describe("acquire "+sqlstore.Quote(name), err) },
		MaxSenders: maxSenders,
		MaxBatch:   maxBatch,
	}
}

// sendBatch decides the requests of batch, sorted by name, in one round
// trip and one transaction, retrying it once on a transient error.
func (s *Store) sendBatch(ctx context.Context, batch []*sqlstore.Pending) ([]leadership.Result, error) {
	results := make([]leadership.Result, len(batch))
	err := sqlstore.RetryOnce(ctx, transient, func() error {
		return s.committed(ctx, func(conn *pgx.Conn) error {
			if len(batch) == 1 { // the same statement, without a batch's framing
				return scanAcquire(conn.QueryRow(ctx, acquireSQL, acquireArgs(batch[0])...), batch[0].Req.Name, &results[0])
			}
			var b pgx.Batch
			runs := distinctRuns(batch)
			if s.statementPerFlag {
				runs = runs[:0]
				for i := range batch {
					runs = append(runs, []int{i})
				}
			}
			for _, run := range runs {
				if len(run) == 1 {
					b.Queue(acquireSQL, acquireArgs(batch[run[0]])...)
					continue
				}
				b.Queue(acquireManySQL, acquireManyArgs(batch, run)...)
			}
			br := conn.SendBatch(ctx, &b)
			for _, run := range runs {
				var err error
				if len(run) == 1 {
					err = scanAcquire(br.QueryRow(), batch[run[0]].Req.Name, &results[run[0]])
				} else {
					var rows pgx.Rows
					if rows, err = br.Query(); err == nil {
						err = scanAcquireMany(rows, batch, run, results)
					}
				}
				if err != nil {
					br.Close()
					return err
				}
			}
			return br.Close()
		})
	})
	return results, err
}

func acquireArgs(p *sqlstore.Pending) []any {
	micros := (p.Req.Lease + time.Microsecond - 1).Microseconds() // round up: never shorter than asked
	return []any{p.Req.Name, p.Req.Holder, p.Req.Version, micros}
}

// scanAcquire reads the result of one acquire statement into res.
func scanAcquire(row pgx.Row, name string, res *leadership.Result) error {
	*res = leadership.Result{Record: leadership.Record{Name: name}}
	err := row.Scan(&res.Acquired, &res.Holder, &res.Version, &res.RenewedAt, &res.ExpiresAt, &res.Now)
	if errors.Is(err, pgx.ErrNoRows) {
		// The row was inserted by a concurrent statement after ours
		// began: we lost, and its content is not visible to us yet.
		// Zero instants make the follower retry soon.
		*res = leadership.Result{Record: leadership.Record{Name: name}}
		return nil
	}
	return err
}
