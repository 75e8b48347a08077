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
		// pgx masks the password in its parse errors.
		return nil, fmt.Errorf("%w: postgres DSN: %v", leadership.ErrInvalidArgument, err)
	}
	cfg.ShouldPing = ShouldPing
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %v", err)
	}
	return pool, nil
}

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
