package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
)

// Open returns a pgx pool on dsn configured for a [Store]: as
// pgxpool.New(ctx, dsn) would (pool settings such as pool_max_conns are
// read from the DSN), with [ShouldPing], so that an attempt is one round
// trip. Like pgxpool.New it connects lazily: a wrong address or password
// shows at the first statement (Build's Migrate). Close the pool after the
// flags that use it. For other settings, build the pool yourself with
// pgxpool.ParseConfig and set its ShouldPing to [ShouldPing].
func Open(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, dsnError{err}
	}
	cfg.ShouldPing = ShouldPing
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open pool: %w", err)
	}
	return pool, nil
}

// dsnError is a DSN that pgx could not parse. Its message does not quote
// the DSN, which may hold a password that pgx's masking misses (pgx quotes
// what it could not parse); the pgx error stays reachable with errors.As.
type dsnError struct{ err error }

func (e dsnError) Error() string {
	return leadership.ErrInvalidArgument.Error() + ": the postgres DSN could not be parsed (it is not shown: it may hold a password): " +
		"want postgres://USER:PASSWORD@HOST:PORT/DATABASE?PARAMS or libpq's key=value pairs"
}

func (e dsnError) Is(target error) bool { return target == leadership.ErrInvalidArgument }
func (e dsnError) Unwrap() error        { return e.err }

// PingAfterIdle is how long a connection must have been idle in the pool
// before [ShouldPing] has pgxpool ping it.
const PingAfterIdle = time.Minute

// ShouldPing is a [pgxpool.Config.ShouldPing] for a pool that serves a
// Store: it has pgxpool ping a connection before lending it only after
// [PingAfterIdle] of idleness, instead of pgxpool's default of one second.
//
// pgxpool's default pings nearly every attempt of a flag: a holder renews
// every Lease/3 and a follower asks about once per lease, both more than a
// second apart, so each attempt would cost two round trips, the ping and
// the statement. With ShouldPing (which [Open] sets) an attempt is one
// round trip, and [New] logs at Info when its pool keeps pgxpool's
// default. What it
// gives up: a connection that the server closed (a restart, a failover,
// idle_session_timeout) is found by the attempt's statement failing
// instead of by the ping, so that attempt fails and the flag tries again
// after its backoff (a quarter of Timeout at first), on another
// connection. Safety does not depend on it either way: a failed attempt
// never raises a flag, and a holder's renewals are retried inside its
// trust window.
//
//	cfg, err := pgxpool.ParseConfig("postgres://app@db/app")
//	cfg.ShouldPing = postgres.ShouldPing
//	pool, err := pgxpool.NewWithConfig(ctx, cfg)
func ShouldPing(_ context.Context, p pgxpool.ShouldPingParams) bool {
	return p.IdleDuration > PingAfterIdle
}
