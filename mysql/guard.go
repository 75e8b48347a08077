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
// flag's row lock while Quarantine committed starts no term. Quarantine's
// UPDATE waits only for acquires between that read and their commit. d is
// rounded up to a microsecond.
func (s *Store) Quarantine(ctx context.Context, d time.Duration) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, fmt.Errorf("%w: quarantine duration %v is not positive", leadership.ErrInvalidArgument, d)
	}
	micros := (d + time.Microsecond - 1).Microseconds()
	var until int64
	err := s.inTx(ctx, false, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE leadership_guard SET hold_until = GREATEST(hold_until, `+nowMicros+` + ?) WHERE id = 1`, micros); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT hold_until FROM leadership_guard WHERE id = 1`).Scan(&until)
	})
	if errors.Is(err, sql.ErrNoRows) {
		err = errNoGuardRecord
	}
	if err != nil {
		return time.Time{}, describe("quarantine", err)
	}
	return time.UnixMicro(until), nil
}

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
