package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// TestReleaseLeavesSessionAsFound releases on a pool of one connection,
// a release alone and two sent together, and checks that the releases
// prepared no statement there (each is sent in one round trip, not
// prepared first: a process releases a flag about once) and that their
// asynchronous commit did not leak into the session's synchronous_commit,
// which later statements (the acquire) rely on.
func TestReleaseLeavesSessionAsFound(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := newStore(t, pool)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var before string
	if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(ctx, leadership.Request{Name: "release-session", Holder: "a", Lease: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	released, err := s.Release(ctx, "release-session", "a", res.Version)
	if err != nil || !released {
		t.Fatalf("Release = %v, %v; want released", released, err)
	}
	// Releases sent together: one statement over arrays, sent likewise.
	var together []sqlstore.Release
	for _, n := range []string{"together-1", "together-2"} {
		r, err := s.Acquire(ctx, leadership.Request{Name: n, Holder: "a", Lease: time.Minute})
		if err != nil || !r.Acquired {
			t.Fatalf("Acquire %s = %+v, %v", n, r, err)
		}
		together = append(together, sqlstore.Release{Name: n, Holder: "a", Version: r.Version})
	}
	if got, err := s.ReleaseTogether(ctx, together...); err != nil || !got[0] || !got[1] {
		t.Fatalf("ReleaseTogether = %v, %v; want both released", got, err)
	}
	var prepared int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%pg_notify%'`,
		pgx.QueryExecModeSimpleProtocol).Scan(&prepared); err != nil {
		t.Fatal(err)
	}
	if prepared != 0 {
		t.Errorf("the release left %d prepared statements on the session, want 0 (one round trip, nothing prepared)", prepared)
	}
	var after string
	if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("synchronous_commit after the release = %q, want the session's %q", after, before)
	}
	got, err := s.Acquire(ctx, leadership.Request{Name: "release-session", Holder: "b", Lease: time.Minute})
	if err != nil || !got.Acquired || got.Version != res.Version+1 {
		t.Fatalf("Acquire by b after the release = %+v, %v; want a new term %d", got, err, res.Version+1)
	}
}
