package mysql

import (
	"context"
	"database/sql"
	"errors"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// fenceSQL reads the row of the flag under a shared (S) record lock: a
// locking read, which reads the latest committed row whatever the
// isolation level (in REPEATABLE READ too, not the transaction's
// snapshot), waiting for a transaction that is changing it. LOCK IN
// SHARE MODE is spelled the way both MariaDB and MySQL accept. The
// acquire's INSERT … ON DUPLICATE KEY UPDATE (in the procedure or in
// statement mode), Release and Evict need an exclusive (X) lock on the
// record, even when they then change nothing, so they wait for every
// fenced transaction holding S; S locks do not wait for each other.
const fenceSQL = `SELECT holder, version FROM leadership_flags WHERE name = ? LOCK IN SHARE MODE`

// Fence makes tx, a transaction on the database of the flag's store,
// commit only within the term leader leads: a [*leadership.Flag] (its term
// at this moment, and only while it is raised) or a [leadership.Term].
//
// It reads the flag's row with a locking read (LOCK IN SHARE MODE) and
// returns an error wrapping [leadership.ErrNotLeader] unless the row names
// the term (holder and version); tx must then be rolled back. On success
// the shared lock is held until tx ends, and every write to the row waits
// for it (InnoDB), so no later term can start (no takeover, release or
// eviction commits) before tx has committed or rolled back: tx's writes
// come before every write of any later term's fenced transactions. Time
// plays no part: a term whose lease has expired in the database but that
// nobody has taken over yet still fences, since nobody else can start a
// term before tx ends.
//
// Fence first, before the transaction's work: the transaction fails
// before doing work in vain, and it takes the flag's lock before any
// other, which avoids deadlocks with a takeover queued behind another
// fenced transaction. A fence placed last covers the writes before it
// only when leader is the [leadership.Term] taken before them (Flag.Term
// at the job's start): the record locks those writes took do not hold a
// takeover off, so with the *Flag, whose term is asked at the moment of
// the fence, a transaction that wrote in term 1 passes the fence in term
// 3 of the same process and commits after the fenced writes of another
// process's term 2. The lock also delays this process's own renewals,
// and the polls of followers: a fenced transaction that lasts longer than
// the flag's Timeout makes renewals fail, and one that lasts longer than
// the trust window lowers the flag (its later fences fail), while the
// transaction itself still commits safely. Keep fenced transactions
// shorter than the renew interval. A holder stopped (SIGSTOP) inside a
// fenced transaction holds the takeover off until it resumes or its
// connection is closed (wait_timeout); the waiting acquire statements fail
// after innodb_lock_wait_timeout and are retried by their flags.
//
// Fence never retries; a deadlock or lock wait timeout is returned as it
// is (see [RunFenced]).
func Fence(ctx context.Context, tx *sql.Tx, leader leadership.Leader) error {
	read := func(name string) (holder string, version int64, err error) {
		err = tx.QueryRowContext(ctx, fenceSQL, name).Scan(&holder, &version)
		return holder, version, err
	}
	noRows := func(err error) bool { return errors.Is(err, sql.ErrNoRows) }
	return sqlstore.CheckFence(leader, read, noRows, func(name string, err error) error {
		return describe("fence "+sqlstore.Quote(name), err)
	})
}

// RunFenced runs fn in a transaction of db fenced by [Fence] first, and
// commits it; it rolls it back when fn, the fence or the commit fails,
// returning the error (one wrapping [leadership.ErrNotLeader] when the
// term is over: fn has not run, or its writes were rolled back). When the
// database asks for a retry (a deadlock, a lock wait timeout) it runs the
// whole transaction again, fence included, up to five times in all, so
// fn must have no effect outside the transaction. A failed commit whose
// outcome is unknown (a broken connection) is returned, never retried.
func RunFenced(ctx context.Context, db *sql.DB, leader leadership.Leader, fn func(*sql.Tx) error) error {
	fence := func(ctx context.Context, tx *sql.Tx) error { return Fence(ctx, tx, leader) }
	return sqlstore.RunFencedTx(ctx, db, retryTx, fence, fn)
}

// retryTx reports whether err asks for the whole transaction to run
// again: InnoDB rolled it back after a deadlock, or a statement waited
// for a lock longer than innodb_lock_wait_timeout.
func retryTx(err error) bool {
	n := number(err)
	return n == errLockDeadlock || n == errLockWaitTimeout
}
