package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/dbflag/leadership/sqlite"
)

// TestMigrateEndsWithItsContextWhileAnotherHoldsTheWriteLock checks that a
// connection holding the file's write lock (another process's long
// transaction, a stopped `leadership migrate`) holds Migrate, and so
// Build, no longer than its context's deadline, where SQLite's busy
// handler would wait out the whole busy timeout (10 s in the DSN Open
// builds) without heeding the context. Once the lock is free, Migrate
// succeeds.
func TestMigrateEndsWithItsContextWhileAnotherHoldsTheWriteLock(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flags.db")
	other, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lock, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := newStore(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = s.Migrate(ctx)
	took := time.Since(began)
	t.Logf("Migrate returned after %v, with: %v", took, err)
	if err == nil {
		t.Fatal("Migrate succeeded while another connection held the write lock")
	}
	if took > 3*time.Second {
		t.Fatalf("Migrate given 0.5 s returned after %v while another connection held the write lock", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		t.Fatalf("Migrate = %v before its deadline", err)
	}
	if _, err := lock.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate after the lock was let go: %v", err)
	}
}
