package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

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
// the statement. With ShouldPing an attempt is one round trip. What it
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
