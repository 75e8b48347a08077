package postgres_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
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

// TestAHolderKeepsItsTermWhenTheServerClosesItsConnections: with
// postgres.ShouldPing nothing checks a connection before an attempt, so
// after the server closed the pool's connections (a restart, a failover,
// an administrator) the holder's next renewal fails on one; the flag tries
// again after its backoff, on a new connection, inside its trust window,
// and keeps its term without lowering.
func TestAHolderKeepsItsTermWhenTheServerClosesItsConnections(t *testing.T) {
	t.Parallel()
	app := "lt-closed-" + randomHex()
	dsn := schemaDSN(t, testdb.Postgres(t))
	cfg, err := pgxpool.ParseConfig(withParam(t, dsn, "application_name", app))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ShouldPing = postgres.ShouldPing
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	reg := prometheus.NewRegistry()
	var lowered atomic.Int64
	const lease = 3 * time.Second // renew every 1 s, Timeout 600 ms, trusted for 2.7 s
	// Without the listener, which would otherwise meet a closed
	// connection first, reconnect, and hand the renewals a new one.
	s, err := postgres.New(pool, postgres.WithoutNotifications())
	if err != nil {
		t.Fatal(err)
	}
	f, err := leadership.NewFlag().Store(s).Name("closed-" + randomHex()).Lease(lease).
		MetricsRegisterer(reg).OnLower(func() { lowered.Add(1) }).Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	token, _ := f.Token()

	var killed int
	if err := newPool(t, dsn).QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1`, app).Scan(&killed); err != nil || killed == 0 {
		t.Fatalf("backends of the flag's pool terminated: %d, %v; want some", killed, err)
	}
	time.Sleep(2 * lease) // two trust windows: a term not renewed would have ended
	if got, ok := f.Token(); !ok || got != token || lowered.Load() != 0 {
		t.Fatalf("after the server closed the pool's %d connections: token %d, raised %v, lowered %d times; want token %d kept, never lowered",
			killed, got, ok, lowered.Load(), token)
	}
	if n := failedAttempts(t, reg); n < 1 {
		t.Fatalf("%v failed attempts after the server closed the connections: the test did not make a renewal meet a closed connection", n)
	}
}

// failedAttempts sums the flag's error counter on reg.
func failedAttempts(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == leadership.MetricErrors {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
