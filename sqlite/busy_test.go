package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/sqlite"
)

// TestAWriteWaitsForTheLockNoLongerThanItsContext holds the database's
// write lock from another process (a BEGIN IMMEDIATE on a pool of its
// own) for 3 s, while a store whose connections wait up to 10 s for the
// lock (the busy timeout of Open's DSN) sends a lone attempt, a batch, a
// release and an eviction, each under a context of 200 ms: each must
// return soon after its context ends, not when the lock is let go. The
// busy timeout lowered for a write is set back afterwards: after a
// renewal under a 5 s context, the store's one connection has its 10 s
// again.
func TestAWriteWaitsForTheLockNoLongerThanItsContext(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flags.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1) // every write on one connection: its busy timeout must be set back
	s := newStore(t, db)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(ctx, leadership.Request{Name: "f", Holder: "a", Lease: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	other, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	hold := func(d time.Duration) {
		t.Helper()
		conn, err := other.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(d, func() {
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
			conn.Close()
		})
	}
	const limit = 200 * time.Millisecond
	hold(3 * time.Second)
	writes := []struct {
		name string
		do   func(context.Context) error
	}{
		{"lone attempt", func(ctx context.Context) error {
			_, err := s.Acquire(ctx, leadership.Request{Name: "f", Holder: "a", Version: res.Version, Lease: time.Minute})
			return err
		}},
		{"batch", func(ctx context.Context) error {
			_, err := s.AcquireTogether(ctx, leadership.Request{Name: "f", Holder: "a", Version: res.Version, Lease: time.Minute},
				leadership.Request{Name: "g", Holder: "a", Lease: time.Minute})
			return err
		}},
		{"release", func(ctx context.Context) error { _, err := s.Release(ctx, "f", "a", res.Version); return err }},
		{"evict", func(ctx context.Context) error { _, err := s.Evict(ctx, "f"); return err }},
	}
	for _, w := range writes {
		wctx, cancel := context.WithTimeout(ctx, limit)
		start := time.Now()
		err := w.do(wctx)
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Fatalf("%s while another process holds the write lock: no error", w.name)
		}
		if took > limit+time.Second { // generous: the lock is held 3 s
			t.Errorf("%s under a %v context while another process holds the write lock: returned after %v (%v); want soon after %v", w.name, limit, took, err, limit)
		}
	}
	time.Sleep(3 * time.Second) // the lock is free again
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if res, err := s.Acquire(wctx, leadership.Request{Name: "f", Holder: "a", Version: res.Version, Lease: time.Minute}); err != nil || !res.Acquired {
		t.Fatalf("renewal under a 5 s context = %+v, %v", res, err)
	}
	var busy int64
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil || busy != 10000 {
		t.Fatalf("busy timeout of the store's connection after a write under a 5 s context = %d, %v; want Open's 10000 ms set back", busy, err)
	}
}
