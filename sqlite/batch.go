package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// Batching (sqlstore.Batcher). The acquire statements of the flags of one
// Store that are due while another batch is on its way run in one
// transaction, BEGIN IMMEDIATE to COMMIT: one commit, and one wait for
// the database's write lock, for all of them (a commit in WAL mode
// appends the changed pages and, with synchronous=FULL, syncs the file:
// measured on this project's machine, 549 µs per renewal one by one and
// 102 µs per renewal for 500 in one transaction). A batch of one is the
// statement alone, committed on its own as before. The releases due
// together (a process closing its flags) share a transaction likewise.
// One batch of each kind is in flight per Store at a time: SQLite has one
// writer, so a second would only wait on the file's lock, where the busy
// handler sleeps in steps of up to 100 ms, rather than in the queue.
const (
	maxSenders = 1
	maxBatch   = 512
)

// newBatchers sets the batchers of s.
func (s *Store) newBatchers() {
	s.acquires = sqlstore.NewAcquires(s.sendBatch,
		func(name string, err error) error { return describe(fmt.Sprintf("acquire %q", name), err) }, maxSenders, maxBatch)
	s.releases = sqlstore.NewReleases(s.sendReleases,
		func(name string, err error) error { return describe(fmt.Sprintf("release %q", name), err) }, maxSenders, maxBatch)
}

// MaxAcquireBatch is the most Acquire calls the store runs in one
// transaction. It tells flags that the store batches: the holders of its
// flags renew at ticks they share (see
// [leadership.FlagBuilder.RenewInterval]), in groups of half a batch, so
// their renewals are due at one instant and commit together, whatever the
// load, instead of batching only when attempts happen to overlap.
func (s *Store) MaxAcquireBatch() int { return maxBatch }

// RenewalTicks returns the grid of renewal ticks shared by the flags of
// the store in this process (leadership.AcquireBatcher).
func (s *Store) RenewalTicks() *leadership.RenewalTicks { return &s.ticks }

// sendBatch runs the acquire statements of batch in one transaction on a
// connection checked to be outside one, and commits it before returning.
// A failed statement rolls them all back.
func (s *Store) sendBatch(ctx context.Context, batch []*sqlstore.PendingAcquire) ([]leadership.Result, error) {
	conn, err := s.outsideTx(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if len(batch) == 1 {
		res, err := s.acquireOn(ctx, conn.Conn, batch[0].Req)
		return []leadership.Result{res}, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		rollback(conn.Conn) // it may have begun
		return nil, fmt.Errorf("begin a transaction for %d acquires: %w", len(batch), err)
	}
	results := make([]leadership.Result, len(batch))
	for i, p := range batch {
		if results[i], err = s.acquireOn(ctx, conn.Conn, p.Req); err != nil {
			rollback(conn.Conn)
			return nil, err
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		rollback(conn.Conn)
		return nil, fmt.Errorf("commit %d acquires: %w", len(batch), err)
	}
	return results, nil
}

// sendReleases ends the terms of batch, sorted by name, that still hold
// their rows, in one transaction on a connection checked to be outside
// one, commits it before returning, reports which it ended, and wakes the
// flags of this store waiting on those. A failed statement rolls them
// all back. A batch of one is the statement alone.
func (s *Store) sendReleases(ctx context.Context, batch []*sqlstore.PendingRelease) ([]bool, error) {
	conn, err := s.outsideTx(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	released := make([]bool, len(batch))
	if len(batch) > 1 {
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			rollback(conn.Conn) // it may have begun
			return nil, fmt.Errorf("begin a transaction for %d releases: %w", len(batch), err)
		}
	}
	for i, p := range batch {
		if released[i], err = s.releaseOn(ctx, conn.Conn, p.Req); err != nil {
			if len(batch) > 1 {
				rollback(conn.Conn)
			}
			return nil, err
		}
	}
	if len(batch) > 1 {
		if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
			rollback(conn.Conn)
			return nil, fmt.Errorf("commit %d releases: %w", len(batch), err)
		}
	}
	if slices.Contains(released, true) {
		announceRelease(s.filePath(ctx, conn.Conn)) // notify.go
	}
	for i, p := range batch {
		if released[i] {
			s.hub.Notify(p.Req.Name)
		}
	}
	return released, nil
}

// rollback ends the transaction of conn, after a statement of it failed
// or its context ended, and after a BEGIN or a COMMIT that failed: the
// driver reports the end of the statement's context when it came as the
// statement completed, so a BEGIN that reports it may have begun the
// transaction (and taken the write lock), and a COMMIT that reports it
// may have committed. When ROLLBACK fails for another reason than there
// being no transaction, the connection is discarded rather than returned
// to the pool inside a transaction.
func rollback(conn *sql.Conn) {
	_, err := conn.ExecContext(context.Background(), "ROLLBACK")
	if err != nil && !noTransaction(err) {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}
