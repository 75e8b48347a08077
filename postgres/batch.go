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
// The releases due together (a process closing its flags) travel likewise
// in one statement, releaseManySQL; a release alone is releaseSQL.
// The session must be idle afterwards (see committed), so the batch has
// committed before any result is returned.
const (
	// maxSenders is how many batches of one Store may be in flight at once.
	maxSenders = 2
	// maxBatch is the most requests in one batch.
	maxBatch = 512
)

// newBatchers sets the batchers of s.
func (s *Store) newBatchers() {
	s.acquires = sqlstore.NewAcquires(s.sendBatch,
		func(name string, err error) error { return describe("acquire "+sqlstore.Quote(name), err) }, maxSenders, maxBatch)
	s.releases = sqlstore.NewReleases(s.sendReleases,
		func(name string, err error) error { return describe("release "+sqlstore.Quote(name), err) }, maxSenders, maxBatch)
}

// MaxAcquireBatch is the most Acquire calls the store sends in one batch.
// It tells flags that the store batches: the holders of its flags renew
// at ticks they share (see [leadership.FlagBuilder.RenewInterval]), in
// groups of half a batch, so their renewals are due at one instant and
// travel in a few batches per group, whatever the load, instead of
// batching only when attempts happen to overlap.
func (s *Store) MaxAcquireBatch() int { return maxBatch }

// RenewalTicks returns the grid of renewal ticks shared by the flags of
// the store in this process (leadership.AcquireBatcher).
func (s *Store) RenewalTicks() *leadership.RenewalTicks { return &s.ticks }

// sendBatch decides the requests of batch, sorted by name, in one round
// trip and one transaction, retrying it once on a transient error.
func (s *Store) sendBatch(ctx context.Context, batch []*sqlstore.PendingAcquire) ([]leadership.Result, error) {
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

func acquireArgs(p *sqlstore.PendingAcquire) []any {
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

// releaseManySQL is releaseSQL for many terms in one statement: $1 names,
// $2 holders, $3 versions, arrays in one order. It locks
// the rows whose term it ends in the order of their names (locked), as
// the acquire statements do, so that it never deadlocks with them, then
// ends those terms and notifies each, as releaseSQL does, and returns
// the position (1-based) of each request whose term it ended. The terms
// are checked again by the UPDATE, on the rows it has locked. A row that
// two requests (of one term) match is updated and returned once, with the
// position of one of them.
const releaseManySQL = `
WITH req AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS r(name, holder, version, i)
), locked AS MATERIALIZED (
    SELECT f.name, r.holder, r.version, r.i FROM leadership_flags f JOIN req r ON f.name = r.name
    WHERE f.holder = r.holder AND f.holder <> '' AND f.version = r.version
    ORDER BY f.name COLLATE "C"
    FOR UPDATE OF f
), changed AS (
    UPDATE leadership_flags f SET holder = '', expires_at = LEAST(f.expires_at, now())
    FROM locked l
    WHERE f.name = l.name AND f.holder = l.holder AND f.holder <> '' AND f.version = l.version
    RETURNING f.name, l.i
)
SELECT i, pg_notify('` + Channel + `', json_build_object('schema', current_schema(), 'name', name)::text)
FROM changed, set_config('synchronous_commit', 'off', true)`

// sendReleases ends the terms of batch, sorted by name, that still hold
// their rows, in one round trip and one transaction, retried once on a
// transient error, and reports which it ended. Of two requests of one
// term, one ends it, the other finds it ended (as releases alone would).
func (s *Store) sendReleases(ctx context.Context, batch []*sqlstore.PendingRelease) ([]bool, error) {
	released := make([]bool, len(batch))
	if len(batch) == 1 {
		r := batch[0].Req
		n, err := s.changeAndNotify(ctx, releaseSQL, r.Name, r.Holder, r.Version)
		released[0] = n > 0
		return released, err
	}
	names, holders, versions := make([]string, len(batch)), make([]string, len(batch)), make([]int64, len(batch))
	for i, p := range batch {
		names[i], holders[i], versions[i] = p.Req.Name, p.Req.Holder, p.Req.Version
	}
	err := sqlstore.RetryOnce(ctx, transient, func() error {
		clear(released)
		return s.committed(ctx, func(conn *pgx.Conn) error {
			rows, err := conn.Query(ctx, releaseManySQL, oneRoundTrip(conn, []any{names, holders, versions})...)
			if err != nil {
				return err
			}
			var i int64
			_, err = pgx.ForEachRow(rows, []any{&i, nil}, func() error {
				if i < 1 || int(i) > len(batch) || released[i-1] {
					return errors.New("release many: a result row names no request of the statement, or one twice")
				}
				released[i-1] = true
				return nil
			})
			return err
		})
	})
	return released, err
}
