package postgres_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	mdatabase "github.com/golang-migrate/migrate/v4/database"
	mpgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/migrations"
)

// TestMigrateEndsWithItsContextWhileAnotherHoldsTheMigrationLock checks
// that a session holding golang-migrate's lock (another process
// migrating, a `leadership migrate` that was stopped) holds Migrate, and
// so Build, no longer than its context: golang-migrate's pgx driver waits
// for its advisory lock without one. The error names the holder; once it
// lets go, Migrate succeeds.
func TestMigrateEndsWithItsContextWhileAnotherHoldsTheMigrationLock(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	// golang-migrate's own lock, taken through its driver on a pool of
	// its own.
	db := stdlib.OpenDBFromPool(newPool(t, dsn))
	drv, err := mpgx.WithInstance(db, &mpgx.Config{MigrationsTable: migrations.MigrationsTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Lock(); err != nil {
		t.Fatal(err)
	}
	// The server process holding it: the lock of golang-migrate's key
	// (below 2^32, so objid alone) in this database.
	var database, schema string
	if err := db.QueryRow(`SELECT current_database(), current_schema()`).Scan(&database, &schema); err != nil {
		t.Fatal(err)
	}
	key, err := mdatabase.GenerateAdvisoryLockId(database, schema, migrations.MigrationsTable)
	if err != nil {
		t.Fatal(err)
	}
	var holder int
	if err := db.QueryRow(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = 0 AND objid = $1::bigint::oid
AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, key).Scan(&holder); err != nil {
		t.Fatalf("find the session holding the migration lock: %v", err)
	}
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			if err := drv.Unlock(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(func() { unlock(); _ = drv.Close() })

	s := newStore(t, newPool(t, dsn))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- s.Migrate(ctx) }()
	select {
	case err := <-done:
		t.Logf("Migrate returned %v after its context's end, with: %v", time.Since(began)-time.Second, err)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "migration lock") {
			t.Fatalf("Migrate while another session holds the migration lock = %v; want the context's error, naming the migration lock", err)
		}
		if !strings.Contains(err.Error(), strconv.Itoa(holder)) {
			t.Fatalf("Migrate's error %q does not name the server process %d that holds the lock", err, holder)
		}
	case <-time.After(15 * time.Second):
		unlock() // lets the stuck Migrate finish, so that the test ends
		<-done
		t.Fatal("Migrate was still waiting for the migration lock 14 s after its context ended")
	}
	unlock()
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate after the holder let the lock go: %v", err)
	}
}
