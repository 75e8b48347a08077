package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

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
// statement alone, committed on its own as before. One batch is in
// flight per Store at a time: SQLite has one writer, so a second would
// only wait on the file's lock, where the busy handler sleeps in steps of
// up to 100 ms, rather than in the queue.
const (
	maxSenders = 1
	maxBatch   = 512
)

// newBatcher returns the batcher of s.
func (s *Store) newBatcher() *sqlstore.Batcher {
	return &sqlstore.Batcher{
		Send:       s.sendBatch,
		Describe:   func(name string, err error) error { return describe(fmt.Sprintf("acquire %q", name), err) },
		MaxSenders: maxSenders,
		MaxBatch:   maxBatch,
	}
}

// sendBatch runs the acquire statements of batch in one transaction on a
// connection checked to be outside one, and commits it before returning.
// A failed statement rolls them all back.
func (s *Store) sendBatch(ctx context.Context, batch []*sqlstore.Pending) ([]leadership.Result, error) {
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

// rollback ends the transaction of conn, whose statement failed or whose
// context ended; if that fails too, the connection is discarded rather
// than returned to the pool inside a transaction.
func rollback(conn *sql.Conn) {
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}
