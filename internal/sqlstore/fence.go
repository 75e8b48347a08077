package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dbflag/leadership"
)

// FencedAttempts is how many transactions a store's RunFenced runs at
// most when the database keeps asking for a retry.
const FencedAttempts = 5

// RetryTx runs attempt, a whole transaction, again while retryable reports
// that its error asks for one (a serialization failure, a deadlock, a
// busy database: the server rolled the transaction back), up to
// [FencedAttempts] times, pausing a little longer each time, unless ctx
// ends first. An error wrapping [leadership.ErrNotLeader] is never
// retried: the term is over.
func RetryTx(ctx context.Context, retryable func(error) bool, attempt func() error) error {
	var err error
	for i := range FencedAttempts {
		if i > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(time.Duration(i*i) * retryPause):
			}
		}
		err = attempt()
		if err == nil || errors.Is(err, leadership.ErrNotLeader) || !retryable(err) {
			return err
		}
	}
	return err
}

// Leading returns the term leader leads, or an error wrapping
// [leadership.ErrNotLeader] when it leads none.
func Leading(leader leadership.Leader) (leadership.Term, error) {
	if leader == nil {
		return leadership.Term{}, fmt.Errorf("%w: fence: leader is nil", leadership.ErrInvalidArgument)
	}
	t, ok := leader.Term()
	if !ok {
		if t.Name != "" || t.Holder != "" || t.Version != 0 {
			return t, fmt.Errorf("%w: fence: %+v is not a term (it needs a flag name, a holder and a positive version)", leadership.ErrNotLeader, t)
		}
		return t, fmt.Errorf("%w: fence: the flag is not raised", leadership.ErrNotLeader)
	}
	return t, nil
}

// NotLeader is the error of a fence that found the row of t.Name naming
// another term: holder and version as read, or no row at all (found
// false).
func NotLeader(t leadership.Term, found bool, holder string, version int64) error {
	switch {
	case !found:
		return fmt.Errorf("%w: fence: flag %q has no row", leadership.ErrNotLeader, t.Name)
	case holder == "":
		return fmt.Errorf("%w: fence: flag %q is held by nobody at version %d (evicted or released), not by %q at version %d",
			leadership.ErrNotLeader, t.Name, version, t.Holder, t.Version)
	}
	return fmt.Errorf("%w: fence: flag %q is held by %q at version %d, not by %q at version %d",
		leadership.ErrNotLeader, t.Name, holder, version, t.Holder, t.Version)
}

// RunFencedTx is the body of the database/sql stores' RunFenced: it runs
// fn in a transaction of db fenced first by fence, commits it, rolls it
// back when the fence or fn fails, and runs it all again while retryable
// says the database asks for it (see [RetryTx]).
func RunFencedTx(ctx context.Context, db *sql.DB, retryable func(error) bool,
	fence func(context.Context, *sql.Tx) error, fn func(*sql.Tx) error) error {
	return RetryTx(ctx, retryable, func() error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fence(ctx, tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// CheckFence is the body of a store's Fence that reads the flag's row
// under a lock: read reads holder and version of the row named, noRows
// tells the driver's "no row" error, and describe wraps any other error
// with the flag's name.
// It returns nil when the row names the term leader leads, else an error
// wrapping [leadership.ErrNotLeader].
func CheckFence(leader leadership.Leader, read func(name string) (holder string, version int64, err error),
	noRows func(error) bool, describe func(name string, err error) error) error {
	t, err := Leading(leader)
	if err != nil {
		return err
	}
	holder, version, err := read(t.Name)
	switch {
	case err != nil && noRows(err):
		return NotLeader(t, false, "", 0)
	case err != nil:
		return describe(t.Name, err)
	case holder != t.Holder || version != t.Version:
		return NotLeader(t, true, holder, version)
	}
	return nil
}
