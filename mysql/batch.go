package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// newBatchers sets the batchers of s, in its mode.
func (s *Store) newBatchers() {
	s.acquires = sqlstore.NewAcquires(s.sendBatch,
		func(name string, err error) error { return describe("acquire "+sqlstore.Quote(name), err) }, maxSenders, maxBatch)
	if s.noRoutines {
		s.acquires.MaxBatch = maxStatementBatch
	}
	s.releases = sqlstore.NewReleases(s.sendReleases,
		func(name string, err error) error { return describe("release "+sqlstore.Quote(name), err) }, maxSenders, maxBatch)
}

// MaxAcquireBatch is the most Acquire calls the store sends in one batch:
// 512 in routine mode, 32 in statement mode.
// It tells flags that the store batches: the holders of its flags renew
// at ticks they share (see [leadership.FlagBuilder.RenewInterval]), in
// groups of half a batch, so their renewals are due at one instant and
// travel in a few batches per group (one CALL each in routine mode),
// whatever the load, instead of batching only when attempts happen to
// overlap.
func (s *Store) MaxAcquireBatch() int { return s.acquires.MaxBatch }

// RenewalTicks returns the grid of renewal ticks shared by the flags of
// the store in this process (leadership.AcquireBatcher).
func (s *Store) RenewalTicks() *leadership.RenewalTicks { return &s.ticks }

// sendBatch decides the requests of batch, sorted by name, and returns
// their results once they are committed.
func (s *Store) sendBatch(ctx context.Context, batch []*sqlstore.PendingAcquire) ([]leadership.Result, error) {
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
func (s *Store) acquireOneByOne(ctx context.Context, batch []*sqlstore.PendingAcquire, results []leadership.Result) error {
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
func (s *Store) acquireMany(ctx context.Context, batch []*sqlstore.PendingAcquire, results []leadership.Result) error {
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
func encodeRequests(batch []*sqlstore.PendingAcquire) (string, error) {
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
func scanAcquiredMany(rows *sql.Rows, batch []*sqlstore.PendingAcquire, results []leadership.Result) error {
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
	var won, version, renewed, expires jsonInt
	for i, to := range []any{&won, &res.Holder, &version, &renewed, &expires} {
		if err := json.Unmarshal(e[i], to); err != nil {
			return err
		}
	}
	res.Acquired, res.Version = won != 0, int64(version)
	res.RenewedAt, res.ExpiresAt = time.UnixMicro(int64(renewed)), time.UnixMicro(int64(expires))
	return nil
}

// jsonInt is an integer that JSON_ARRAY wrote as a number (MySQL) or as a
// string of digits (MariaDB, for a routine's BIGINT variable).
type jsonInt int64

func (n *jsonInt) UnmarshalJSON(raw []byte) error {
	v, err := strconv.ParseInt(strings.Trim(string(raw), `"`), 10, 64)
	if err != nil {
		return errors.New("not an integer: " + string(raw))
	}
	*n = jsonInt(v)
	return nil
}

// releaseSQL ends the term (holder, version) of the flag name if it holds
// the row: a release alone.
const releaseSQL = `UPDATE leadership_flags SET holder = '', expires_at = LEAST(expires_at, ` + nowMicros + `)
WHERE name = ? AND holder = ? AND holder <> '' AND version = ?`

// sendReleases ends the terms of batch, sorted by name, that still hold
// their rows, in one transaction it commits (in either mode: no routine
// is involved), and reports which it ended; then it records each release
// (released: the terms the store leads, the holders' bells to ring) and
// wakes this store's flags waiting on the rows it freed. A batch of one
// is releaseSQL alone, in its transaction; a batch of several is
// releaseInTx.
func (s *Store) sendReleases(ctx context.Context, batch []*sqlstore.PendingRelease) ([]bool, error) {
	released := make([]bool, len(batch))
	var err error
	if len(batch) == 1 {
		r := batch[0].Req
		released[0], err = s.change(ctx, releaseSQL, r.Name, r.Holder, r.Version)
	} else {
		err = sqlstore.RetryOnce(ctx, transient, func() error {
			clear(released)
			return s.inTx(ctx, false, func(tx *sql.Tx) error { return releaseInTx(ctx, tx, batch, released) })
		})
	}
	if err != nil {
		return nil, err
	}
	for i, p := range batch {
		if released[i] {
			s.hub.Notify(p.Req.Name)
		}
		s.released(p.Req.Name, p.Req.Holder, p.Req.Version, released[i])
	}
	return released, nil
}

// releaseInTx ends, in tx, the terms of batch (sorted by name) that hold
// their rows, and marks them in released: it locks the rows of the
// batch's names in the order of their names (as the acquire statements
// lock rows, so the two never deadlock) and reads their terms, then ends
// the terms that requests name in one UPDATE. Three statements besides
// the transaction's START and COMMIT, whatever the batch's size. A
// request for a term that an earlier request of the batch ended finds it
// ended, as a release alone would.
func releaseInTx(ctx context.Context, tx *sql.Tx, batch []*sqlstore.PendingRelease, released []bool) error {
	var names []any
	for i, p := range batch {
		if i == 0 || p.Req.Name != batch[i-1].Req.Name {
			names = append(names, p.Req.Name)
		}
	}
	rows, err := tx.QueryContext(ctx, `SELECT name, holder, version FROM leadership_flags WHERE name IN (`+
		placeholders(len(names))+`) ORDER BY name FOR UPDATE`, names...)
	if err != nil {
		return err
	}
	held := make(map[string]sqlstore.Release, len(names)) // the term holding each row
	for rows.Next() {
		var t sqlstore.Release
		if err := rows.Scan(&t.Name, &t.Holder, &t.Version); err != nil {
			rows.Close()
			return err
		}
		held[t.Name] = t
	}
	if err := rows.Close(); err != nil {
		return err
	}
	var ended []any
	for i, p := range batch {
		if t, ok := held[p.Req.Name]; ok && t.Holder != "" && t == p.Req {
			released[i] = true
			delete(held, t.Name)
			ended = append(ended, t.Name)
		}
	}
	if len(ended) == 0 {
		return nil
	}
	res, err := tx.ExecContext(ctx, `UPDATE leadership_flags SET holder = '', expires_at = LEAST(expires_at, `+nowMicros+`)
WHERE holder <> '' AND name IN (`+placeholders(len(ended))+`)`, ended...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err == nil && n != int64(len(ended)) {
		err = fmt.Errorf("the UPDATE of a batch of releases changed %d of the %d rows it had locked", n, len(ended))
	}
	return err
}

// placeholders is n question marks separated by commas.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
