package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// Batching (sqlstore.Batcher). The acquire requests of the flags of one
// Store that are due while another batch is on its way are sent together.
// In routine mode a batch is one CALL of leadership_acquire_many
// (migration 0012): one round trip, one transaction and one read of the
// failover guard for all of them, each request decided by the rules of
// leadership_acquire. In statement mode a batch of up to 32 is one
// transaction: one read of the guard, then the upsert and the read of the
// outcome of each request, then the guard's locked re-read (see
// acquireStatements), between one START TRANSACTION and one COMMIT. A
// batch of one is an attempt alone, exactly as without batching. Either
// way the batch has committed before any result is returned.
const (
	// maxSenders is how many batches of one Store may be in flight at once.
	maxSenders = 2
	// maxBatch is the most requests in one batch in routine mode: at most
	// about 1 MB of JSON each way (names and holders of 255 four-byte
	// characters), below the default max_allowed_packet (16 MB in
	// MariaDB, 64 MB in MySQL 8). A reply longer than the server's
	// max_allowed_packet would come back NULL, after the commit: an error
	// for every request of the batch, whose rows the next attempts learn.
	maxBatch = 512
	// maxStatementBatch is the most requests in one batch in statement
	// mode, where each request is two round trips in the batch's one
	// transaction (three during a hold): a small batch keeps the
	// transaction, and the row locks it holds, short on a distant server,
	// well inside the Timeout of the earliest request.
	maxStatementBatch = 32
	// manyMissingFor is how long a store that found leadership_acquire_many
	// missing, or not executable by its user, sends the requests of a
	// batch one CALL of leadership_acquire each before it tries again.
	manyMissingFor = time.Minute
)

// newBatcher returns the batcher of s, in its mode.
func (s *Store) newBatcher() *sqlstore.Batcher {
	b := &sqlstore.Batcher{
		Send:       s.sendBatch,
		Describe:   func(name string, err error) error { return describe("acquire "+sqlstore.Quote(name), err) },
		MaxSenders: maxSenders,
		MaxBatch:   maxBatch,
	}
	if s.noRoutines {
		b.MaxBatch = maxStatementBatch
	}
	return b
}

// sendBatch decides the requests of batch, sorted by name, and returns
// their results once they are committed.
func (s *Store) sendBatch(ctx context.Context, batch []*sqlstore.Pending) ([]leadership.Result, error) {
	results := make([]leadership.Result, len(batch))
	if s.noRoutines {
		return results, s.acquireStatements(ctx, batch, results)
	}
	if len(batch) == 1 {
		return results, s.acquireCall(ctx, batch[0].Req, &results[0])
	}
	if s.callPerFlag || time.Now().UnixNano() < s.manyMissingUntil.Load() {
		return results, s.acquireOneByOne(ctx, batch, results)
	}
	err := s.acquireMany(ctx, batch, results)
	if n := number(err); n == errSPDoesNotExist || n == errProcAccessDenied {
		// A schema older than version 12 (migrated by an administrator
		// with an earlier release), or EXECUTE granted on
		// leadership_acquire alone: still correct, one CALL per flag.
		s.manyMissingUntil.Store(time.Now().Add(manyMissingFor).UnixNano())
		return results, s.acquireOneByOne(ctx, batch, results)
	}
	return results, err
}

// acquireOneByOne sends the requests of batch one CALL of
// leadership_acquire each, in order, each committed on its own.
func (s *Store) acquireOneByOne(ctx context.Context, batch []*sqlstore.Pending, results []leadership.Result) error {
	for i, p := range batch {
		if err := s.acquireCall(ctx, p.Req, &results[i]); err != nil {
			return err
		}
	}
	return nil
}

// leaseMicros is the lease of req in whole microseconds, rounded up: never
// shorter than asked.
func leaseMicros(req leadership.Request) int64 {
	return (req.Lease + time.Microsecond - 1).Microseconds()
}

// acquireMany decides batch in one CALL of leadership_acquire_many,
// retried once on a transient error (the procedure rolls everything back
// on an error).
func (s *Store) acquireMany(ctx context.Context, batch []*sqlstore.Pending, results []leadership.Result) error {
	requests, err := encodeRequests(batch)
	if err != nil {
		return err
	}
	stmt, err := s.prepare(ctx, &s.acquireManyStmt, `CALL leadership_acquire_many(?)`)
	if err != nil {
		return err
	}
	return sqlstore.RetryOnce(ctx, transient, func() error {
		rows, err := stmt.QueryContext(ctx, requests)
		if err != nil {
			return err
		}
		return scanAcquiredMany(rows, batch, results)
	})
}

// encodeRequests is the JSON array leadership_acquire_many takes:
// [name, holder, version, lease_us] per request.
func encodeRequests(batch []*sqlstore.Pending) (string, error) {
	reqs := make([][4]any, len(batch))
	for i, p := range batch {
		reqs[i] = [4]any{p.Req.Name, p.Req.Holder, p.Req.Version, leaseMicros(p.Req)}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(reqs); err != nil {
		return "", err
	}
	return b.String(), nil
}

// scanAcquiredMany reads the reply of leadership_acquire_many into
// results, and closes rows. As in scanAcquired, the reply is trusted only
// once it has been read to its end.
func scanAcquiredMany(rows *sql.Rows, batch []*sqlstore.Pending, results []leadership.Result) error {
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	if len(cols) != 3 || cols[0] != "now" || cols[2] != "results" {
		return fmt.Errorf("the procedure leadership_acquire_many returned the columns %v, not those of schema version 12 and later: apply the migrations (Build does unless Migrate(false); or leadership migrate)", cols)
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	var (
		now, hold int64
		reply     []byte
	)
	if err := rows.Scan(&now, &hold, &reply); err != nil {
		return err
	}
	if err := rows.Close(); err != nil {
		return err
	}
	var elems [][]json.RawMessage
	if err := json.Unmarshal(reply, &elems); err != nil {
		return fmt.Errorf("read the results of leadership_acquire_many: %w", err)
	}
	if len(elems) != len(batch) {
		return fmt.Errorf("leadership_acquire_many returned %d results for %d requests", len(elems), len(batch))
	}
	for i, e := range elems {
		res := leadership.Result{Record: leadership.Record{Name: batch[i].Req.Name}, Now: time.UnixMicro(now)}
		if err := decodeResult(e, &res); err != nil {
			return fmt.Errorf("read the result of leadership_acquire_many for %s: %w", sqlstore.Quote(batch[i].Req.Name), err)
		}
		results[i] = res
	}
	return nil
}

// decodeResult reads [acquired, holder, version, renewed_at, expires_at]
// into res.
func decodeResult(e []json.RawMessage, res *leadership.Result) error {
	if len(e) != 5 {
		return fmt.Errorf("%d values, want 5", len(e))
	}
	var won, renewed, expires int64
	for _, f := range []struct {
		raw json.RawMessage
		to  *int64
	}{{e[0], &won}, {e[2], &res.Version}, {e[3], &renewed}, {e[4], &expires}} {
		n, err := jsonInt(f.raw)
		if err != nil {
			return err
		}
		*f.to = n
	}
	if err := json.Unmarshal(e[1], &res.Holder); err != nil {
		return err
	}
	res.Acquired = won != 0
	res.RenewedAt, res.ExpiresAt = time.UnixMicro(renewed), time.UnixMicro(expires)
	return nil
}

// jsonInt reads an integer that JSON_ARRAY wrote as a number (MySQL) or
// as a string of digits (MariaDB, for a routine's BIGINT variable).
func jsonInt(raw json.RawMessage) (int64, error) {
	text := string(raw)
	if unquoted, err := strconv.Unquote(text); err == nil {
		text = unquoted
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, errors.New("not an integer: " + string(raw))
	}
	return n, nil
}
