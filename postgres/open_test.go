package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/postgres"
)

// countingProxy forwards TCP connections to upstream and counts what
// clients send in: pgx writes each round trip's messages (a ping, a
// statement) in one write, which the proxy reads at once on loopback.
func countingProxy(t *testing.T, upstream string) (addr string, sends *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sends = new(atomic.Int64)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", upstream)
			if err != nil {
				client.Close()
				continue
			}
			track(client)
			track(server)
			wg.Go(func() {
				defer server.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := client.Read(buf)
					if n > 0 {
						sends.Add(1)
						if _, err := server.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
			wg.Go(func() {
				defer client.Close()
				_, _ = io.Copy(client, server)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String(), sends
}

// TestAnAttemptOnAPoolOfOpenIsOneRoundTrip renews a term, through a pool
// of postgres.Open whose connection has been idle for more than a second
// (as a holder's is between renewals), counting what crosses the wire: one
// round trip, the statement. The same on a pool of pgxpool.New is two, a
// ping first.
func TestAnAttemptOnAPoolOfOpenIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	for _, tc := range []struct {
		name string
		open func(context.Context, string) (*pgxpool.Pool, error)
		want int64
	}{
		{"postgres.Open", postgres.Open, 1},
		{"pgxpool.New", pgxpool.New, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			addr, sends := countingProxy(t, u.Host)
			u.Host = addr
			q := u.Query()
			q.Set("pool_max_conns", "1") // every statement on the one connection
			u.RawQuery = q.Encode()
			ctx := context.Background()
			pool, err := tc.open(ctx, u.String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			s := newStore(t, pool)
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			req := leadership.Request{Name: "open-" + randomHex(), Holder: "a", Lease: time.Minute}
			res, err := s.Acquire(ctx, req)
			if err != nil || !res.Acquired {
				t.Fatalf("acquire = %+v, %v", res, err)
			}
			req.Version = res.Version
			for range 2 {
				time.Sleep(1100 * time.Millisecond)
				before := sends.Load()
				if res, err := s.Acquire(ctx, req); err != nil || !res.Acquired {
					t.Fatalf("renewal = %+v, %v", res, err)
				}
				if got := sends.Load() - before; got != tc.want {
					t.Errorf("renewal after %v idle on a pool of %s: %d round trips, want %d", 1100*time.Millisecond, tc.name, got, tc.want)
				}
			}
		})
	}
}

// TestNewSaysWhenItsPoolPingsBeforeEachAttempt: New logs at Info that a
// pool with pgxpool's default ShouldPing costs a second round trip per
// attempt, and names the way out; a pool of Open, or one given
// postgres.ShouldPing, gets no such line. No server is needed: pools
// connect lazily.
func TestNewSaysWhenItsPoolPingsBeforeEachAttempt(t *testing.T) {
	t.Parallel()
	const dsn = "postgres://app:secret-password@127.0.0.1:1/app"
	ctx := context.Background()
	own, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	own.ShouldPing = postgres.ShouldPing
	for _, tc := range []struct {
		name string
		open func() (*pgxpool.Pool, error)
		says bool
	}{
		{"pgxpool.New", func() (*pgxpool.Pool, error) { return pgxpool.New(ctx, dsn) }, true},
		{"postgres.Open", func() (*pgxpool.Pool, error) { return postgres.Open(ctx, dsn) }, false},
		{"own config with postgres.ShouldPing", func() (*pgxpool.Pool, error) { return pgxpool.NewWithConfig(ctx, own) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, err := tc.open()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			var buf bytes.Buffer
			if _, err := postgres.New(pool, postgres.WithLogger(slog.New(slog.NewTextHandler(&buf, nil)))); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			said := strings.Contains(out, "level=INFO") && strings.Contains(out, "two round trips") && strings.Contains(out, "postgres.Open")
			if said != tc.says {
				t.Fatalf("New on a pool of %s logged %q; want a line about the ping: %v", tc.name, out, tc.says)
			}
			if strings.Contains(out, "secret-password") {
				t.Fatalf("New logged the password: %q", out)
			}
		})
	}
}

// TestOpenNamesABadDSN: a DSN pgx cannot parse is an invalid argument,
// and the error prints no part of the DSN, in whatever shape (pgx's own
// message masks passwords at best effort: not in "password = x" pairs).
func TestOpenNamesABadDSN(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://app:secret-password@db:notaport/app",
		"host=db password = secret-password port=notaport",
		"host=db password=secret-password sslmode=nonsense",
		"postgres://app@corp:secret-password@db:notaport/app",
	} {
		_, err := postgres.Open(context.Background(), dsn)
		if !errors.Is(err, leadership.ErrInvalidArgument) || !strings.Contains(err.Error(), "postgres DSN") || strings.Contains(err.Error(), "secret-password") {
			t.Errorf("Open(%d-byte DSN) = %v, want an invalid argument naming the DSN, without its password", len(dsn), err)
		}
	}
}
