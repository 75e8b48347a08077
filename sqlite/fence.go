package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// fenceSQL checks that the row names the term, as a write: SQLite has one
// writer at a time per file, and in WAL mode readers never block writers,
// so only the write lock, held by the transaction from this statement
// until it ends, keeps the acquire statement of another process (a write)
// from committing meanwhile. An UPDATE takes the write lock before it
// reads the row, from the latest committed state of the file, so the
// check and the lock are one step. It changes host_writes only, so the
// row stays the same term, and the trigger of migration 2 (which marks
// rows that an older version of the package changed) does not fire.
const fenceSQL = `UPDATE leadership_flags SET host_writes = host_writes + 1
WHERE name = ?1 AND holder = ?2 AND version = ?3`

// Fence makes tx, a transaction on the database file of the flag's store,
// commit only within the term leader leads: a [*leadership.Flag] (its term
// at this moment, and only while it is raised) or a [leadership.Term].
//
// It checks, with a write to the flag's row, that the row names the term
// (holder and version), and returns an error wrapping
// [leadership.ErrNotLeader] unless it does; tx must then be rolled back.
// On success tx holds SQLite's write lock until it ends, so no other
// write to the file, and so no later term (no takeover, release or
// eviction), commits before tx has committed or rolled back: tx's writes
// come before every write of any later term. Time plays no part: a term
// whose lease has expired but that nobody has taken over yet still
// fences, since nobody else can start a term before tx ends.
//
// Fence first, as the transaction's first statement. A transaction that
// begins with BEGIN IMMEDIATE (a *sql.DB from [Open], or _txlock=immediate
// in the DSN) holds the write lock from its start and may fence anywhere
// (and a deferred one from its first write: no other term can start
// between that write and the fence, unlike on PostgreSQL and MySQL);
// a deferred one that has read before the fence fails with SQLITE_BUSY
// (BUSY_SNAPSHOT) at once when another connection wrote since its read,
// instead of waiting, and must be run again (see [RunFenced]).
//
// While the fenced transaction lasts, every other writer of the file
// waits (up to its busy timeout): this process's own renewals and the
// polls of followers too, and, since the attempts of the flags of one
// Store due together share a transaction (see batch.go), the attempts
// queued behind a waiting one. A fenced transaction that lasts longer than the
// flag's Timeout makes renewals fail, and one that lasts longer than the
// trust window lowers the flag (its later fences fail), while the
// transaction itself still commits safely. Keep fenced transactions
// short. A holder stopped (SIGSTOP) inside a fenced transaction holds the
// takeover off until it resumes or dies.
func Fence(ctx context.Context, tx *sql.Tx, leader leadership.Leader) error {
	t, err := sqlstore.Leading(leader)
	if err != nil {
		return err
	}
	r, err := tx.ExecContext(ctx, fenceSQL, t.Name, t.Holder, t.Version)
	if err != nil {
		return describe("fence "+sqlstore.Quote(t.Name), err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return describe("fence "+sqlstore.Quote(t.Name), err)
	}
	if n == 1 {
		return nil
	}
	var holder string
	var version int64
	err = tx.QueryRowContext(ctx, `SELECT holder, version FROM leadership_flags WHERE name = ?`, t.Name).Scan(&holder, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return sqlstore.NotLeader(t, false, "", 0)
	}
	if err != nil {
		return describe("fence "+sqlstore.Quote(t.Name), err)
	}
	return sqlstore.NotLeader(t, true, holder, version)
}

// RunFenced runs fn in a transaction of db fenced by [Fence] first, and
// commits it; it rolls it back when fn, the fence or the commit fails,
// returning the error (one wrapping [leadership.ErrNotLeader] when the
// term is over: fn has not run, or its writes were rolled back). When the
// database reports itself busy (SQLITE_BUSY: the busy timeout ran out, or
// a deferred transaction's snapshot went stale) it runs the whole
// transaction again, fence included, up to five times in all, so fn must
// have no effect outside the transaction.
func RunFenced(ctx context.Context, db *sql.DB, leader leadership.Leader, fn func(*sql.Tx) error) error {
	fence := func(ctx context.Context, tx *sql.Tx) error { return Fence(ctx, tx, leader) }
	return sqlstore.RunFencedTx(ctx, db, busy, fence, fn)
}
