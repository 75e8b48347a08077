package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// fenceSQL reads the row of the flag $1 under a FOR SHARE lock. FOR SHARE
// conflicts with the row lock every write of the store takes (the
// acquire's INSERT … ON CONFLICT DO UPDATE locks the existing row, even
// when its WHERE then leaves it unchanged, in FOR NO KEY UPDATE mode or
// stronger; Release and Evict are UPDATEs), and not with other FOR SHARE
// locks, so fenced transactions of one term run side by side. In READ
// COMMITTED, a row being changed is waited for and then read as
// committed; in REPEATABLE READ and SERIALIZABLE, a row changed since the
// snapshot fails the statement with a serialization failure (40001).
const fenceSQL = `SELECT holder, version FROM leadership_flags WHERE name = $1 FOR SHARE`

// Fence makes tx, a transaction on the database of the flag's store,
// commit only within the term leader leads: a [*leadership.Flag] (its term
// at this moment, and only while it is raised) or a [leadership.Term].
//
// It reads the flag's row under a FOR SHARE lock and returns an error
// wrapping [leadership.ErrNotLeader] unless the row names the term
// (holder and version); tx must then be rolled back. On success the lock
// is held until tx ends, and every write to the row waits for it, so no
// later term can start (no takeover, release or eviction commits) before
// tx has committed or rolled back: tx's writes come before every write of
// any later term's fenced transactions. Time plays no part: a term whose
// lease has expired in the database but that nobody has taken over yet
// still fences, since nobody else can start a term before tx ends.
//
// Fence first, before the transaction's work: the transaction fails
// before doing work in vain, and its reads come from the term too. A
// fence placed last covers the writes before it only when leader is the
// [leadership.Term] taken before them (Flag.Term at the job's start): the
// row locks those writes took do not hold a takeover off, so with the
// *Flag, whose term is asked at the moment of the fence, a transaction
// that wrote in term 1 passes the fence in term 3 of the same process and
// commits after the fenced writes of another process's term 2.
// The lock also delays this process's own renewals, and the polls of
// followers: a fenced transaction that lasts longer than the flag's
// Timeout makes renewals fail, and one that lasts longer than the trust
// window lowers the flag (its later fences fail), while the transaction
// itself still commits safely. Keep fenced transactions shorter than the
// renew interval. A holder stopped (SIGSTOP) inside a fenced transaction
// holds the takeover off until it resumes or its connection dies; set
// idle_in_transaction_session_timeout to bound that.
// Since the attempts of the flags of one Store travel in batches (see
// batch.go), an attempt waiting on the lock also delays the attempts
// batched with it, of other flags of that Store, in this process and in
// followers: one more reason to keep fenced transactions short.
//
// Fence never retries; a serialization failure or deadlock is returned
// as it is (see [RunFenced]).
func Fence(ctx context.Context, tx pgx.Tx, leader leadership.Leader) error {
	read := func(name string) (holder string, version int64, err error) {
		err = tx.QueryRow(ctx, fenceSQL, name).Scan(&holder, &version)
		return holder, version, err
	}
	noRows := func(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
	return sqlstore.CheckFence(leader, read, noRows, func(name string, err error) error {
		return describe("fence "+sqlstore.Quote(name), err)
	})
}

// Beginner begins transactions: [*pgxpool.Pool], [*pgx.Conn].
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// RunFenced runs fn in a transaction of db fenced by [Fence] first, and
// commits it; it rolls it back when fn, the fence or the commit fails,
// returning the error (one wrapping [leadership.ErrNotLeader] when the
// term is over: fn has not run, or its writes were rolled back). When the
// database asks for a retry (serialization failure, deadlock) it runs the
// whole transaction again, fence included, up to five
// times in all, so fn must have no effect outside the
// transaction. A failed commit whose outcome is unknown (a broken
// connection) is returned, never retried.
func RunFenced(ctx context.Context, db Beginner, leader leadership.Leader, fn func(pgx.Tx) error) error {
	return sqlstore.RetryTx(ctx, transient, func() error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if err := Fence(ctx, tx, leader); err != nil {
				return err
			}
			return fn(tx)
		})
	})
}
