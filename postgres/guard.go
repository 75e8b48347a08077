package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbflag/leadership"
)

var _ leadership.Quarantiner = (*Store)(nil)

// Quarantine implements [leadership.Quarantiner]: no new term starts in the
// current schema before database-now + d (or the end of a longer hold
// already in force). Holders whose term has not expired keep renewing it.
// It locks the guard record FOR UPDATE, so it waits for the acquire
// statements in flight, each of which holds the record FOR KEY SHARE from
// its read of the guard to its commit, including one waiting for a flag's
// row lock (held by a fenced transaction, say): they end before Quarantine
// returns, and later ones read its hold. database-now is the clock when
// the lock is granted.
// Use it from a failover hook when the store cannot see the failover (see
// docs/failover.md), or through `leadership quarantine`.
func (s *Store) Quarantine(ctx context.Context, d time.Duration) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, fmt.Errorf("%w: quarantine duration %v is not positive", leadership.ErrInvalidArgument, d)
	}
	micros := (d + time.Microsecond - 1).Microseconds()
	var until time.Time
	err := s.committed(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `
WITH locked AS (SELECT id FROM leadership_guard WHERE id = 1 FOR UPDATE)
UPDATE leadership_guard g SET hold_until = greatest(g.hold_until, clock_timestamp() + $1::bigint * interval '1 microsecond')
FROM locked WHERE g.id = locked.id RETURNING g.hold_until`, micros).Scan(&until)
	})
	if err != nil {
		return time.Time{}, describe("quarantine", guardMissing(err))
	}
	return until, nil
}

// QuarantinedUntil implements [leadership.Quarantiner].
func (s *Store) QuarantinedUntil(ctx context.Context) (until, now time.Time, err error) {
	err = s.pool.QueryRow(ctx, `SELECT hold_until, now() FROM leadership_guard WHERE id = 1`).Scan(&until, &now)
	if err != nil {
		return time.Time{}, time.Time{}, describe("read quarantine", guardMissing(err))
	}
	return until, now, nil
}

// errGuardMissing is returned when the guard record of the schema is
// missing: the table was emptied by hand.
var errGuardMissing = errors.New("the row of leadership_guard is missing (was the table emptied by hand?): restore it with INSERT INTO leadership_guard (id) VALUES (1)")

// guardMissing turns pgx's ErrNoRows from a read of the guard record into
// errGuardMissing.
func guardMissing(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return errGuardMissing
	}
	return err
}
