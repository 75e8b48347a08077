package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dbflag/leadership"
)

var _ leadership.Quarantiner = (*Store)(nil)

// Quarantine implements [leadership.Quarantiner]: in a transaction it
// commits, it raises the guard record's hold_until to database-now + d
// unless it is already later, and returns it. No new term starts after it
// returned and before then; holders keep renewing. An acquire (a CALL, or
// a transaction of statement mode) decides at its start, from the guard
// read without a lock, but reads the record again under a shared lock
// after its requests and decides again when a hold begun meanwhile
// changes its decision (see acquireStatements): one that waited for a
// flag's row lock while Quarantine committed starts no term.
//
// Quarantine never queues for the record: InnoDB would queue every
// acquire's shared lock behind its waiting exclusive one, and a
// transaction that kept the record locked (a process of statement mode
// stopped between its last two statements) would then hold up every
// acquire of the schema, until innodb_lock_wait_timeout even after
// Quarantine's context ended. It locks the record FOR UPDATE NOWAIT and,
// while acquires hold it (each between its locked re-read and its
// commit), tries again after a pause, until ctx ends. d is rounded up to
// a microsecond.
func (s *Store) Quarantine(ctx context.Context, d time.Duration) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, fmt.Errorf("%w: quarantine duration %v is not positive", leadership.ErrInvalidArgument, d)
	}
	micros := (d + time.Microsecond - 1).Microseconds()
	var until int64
	pause := quarantinePause
	locked := false // a try found the record locked
	for {
		err := s.inTx(ctx, false, func(tx *sql.Tx) error {
			var id int
			if err := tx.QueryRowContext(ctx, `SELECT id FROM leadership_guard WHERE id = 1 FOR UPDATE NOWAIT`).Scan(&id); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE leadership_guard SET hold_until = GREATEST(hold_until, `+nowMicros+` + ?) WHERE id = 1`, micros); err != nil {
				return err
			}
			return tx.QueryRowContext(ctx, `SELECT hold_until FROM leadership_guard WHERE id = 1`).Scan(&until)
		})
		if errors.Is(err, sql.ErrNoRows) {
			err = errNoGuardRecord
		}
		if n := number(err); n == errLockWaitTimeout || n == errLockNowait {
			locked = true
			select {
			case <-time.After(pause):
				pause = min(2*pause, quarantinePauseMax)
				continue
			case <-ctx.Done():
			}
		}
		// The context may also end during a try (on a busy server), which
		// then fails with its error alone.
		if err != nil && locked && ctx.Err() != nil {
			err = fmt.Errorf("the guard record stayed locked by acquire transactions (one of statement mode stopped before its commit?) at every try until the context ended: %w", ctx.Err())
		}
		if err != nil {
			return time.Time{}, describe("quarantine", err)
		}
		return time.UnixMicro(until), nil
	}
}

const (
	// errLockNowait is MySQL's error for a lock not granted at once to a
	// statement with NOWAIT; MariaDB reports errLockWaitTimeout.
	errLockNowait = 3572
	// quarantinePause is the first pause of Quarantine before it tries
	// again to lock the guard record; it doubles up to quarantinePauseMax.
	quarantinePause    = 5 * time.Millisecond
	quarantinePauseMax = 200 * time.Millisecond
)

// QuarantinedUntil implements [leadership.Quarantiner]: the guard record's
// hold_until and the database clock, read in one statement. A hold that an
// acquire statement will start when it notices a new incarnation is not
// in force until then, and not reported.
func (s *Store) QuarantinedUntil(ctx context.Context) (until, now time.Time, err error) {
	var u, n int64
	err = s.inTx(ctx, true, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT hold_until, `+nowMicros+` FROM leadership_guard WHERE id = 1`).Scan(&u, &n)
	})
	if errors.Is(err, sql.ErrNoRows) {
		err = errNoGuardRecord
	}
	if err != nil {
		return time.Time{}, time.Time{}, describe("read the quarantine", err)
	}
	return time.UnixMicro(u), time.UnixMicro(n), nil
}
