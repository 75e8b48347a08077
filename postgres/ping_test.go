package postgres_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testdb"
	"github.com/dbflag/leadership/postgres"
)

// countingConn counts the writes of a connection: pgx writes each round
// trip's messages (a ping, a statement) in one write.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestAnAttemptAfterASecondIdleIsOneRoundTrip renews a term through a pool
// whose connection has been idle for more than a second, as every
// renewal's is (a holder renews every Lease/3): with pgxpool's default
// ShouldPing the renewal costs two round trips, a ping and the statement;
// with postgres.ShouldPing it costs one.
func TestAnAttemptAfterASecondIdleIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	for _, tc := range []struct {
		name       string
		shouldPing func(context.Context, pgxpool.ShouldPingParams) bool
		want       int64
	}{
		{"pgxpool default", nil, 2},
		{"postgres.ShouldPing", postgres.ShouldPing, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := pgxpool.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 1
			cfg.ShouldPing = tc.shouldPing
			var writes atomic.Int64
			dialer := &net.Dialer{}
			cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dialer.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return countingConn{Conn: c, writes: &writes}, nil
			}
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			s := newStore(t, pool)
			ctx := context.Background()
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			name := "ping-" + randomHex()
			req := leadership.Request{Name: name, Holder: "a", Lease: time.Minute}
			res, err := s.Acquire(ctx, req)
			if err != nil || !res.Acquired {
				t.Fatalf("acquire = %+v, %v", res, err)
			}
			req.Version = res.Version
			for range 2 { // the second renewal runs the statement prepared by the first
				time.Sleep(1100 * time.Millisecond)
				before := writes.Load()
				if res, err := s.Acquire(ctx, req); err != nil || !res.Acquired {
					t.Fatalf("renewal = %+v, %v", res, err)
				}
				if got := writes.Load() - before; got != tc.want {
					t.Errorf("renewal after %v idle: %d round trips, want %d", 1100*time.Millisecond, got, tc.want)
				}
			}
		})
	}
}
