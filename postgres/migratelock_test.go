package postgres_test

import (
	"fmt"
	"sync"
	"testing"

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
	unlock := sync.OnceFunc(func() {
		if err := drv.Unlock(); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { unlock(); _ = drv.Close() })
	s := newStore(t, newPool(t, dsn))
	testdb.CheckMigrateEndsWithItsContext(t, s.Migrate, fmt.Sprintf("process %d ", holder), unlock)
}

// TestMigrateOnAServerThatNeverAnswersEndsSoonAfterItsContext: Migrate
// on a server that hangs returns soon after its context's end, although
// it then looks for the migration lock's holder.
func TestMigrateOnAServerThatNeverAnswersEndsSoonAfterItsContext(t *testing.T) {
	t.Parallel()
	s := newStore(t, newPool(t, "postgres://u:p@"+testdb.SilentServer(t)+"/db?sslmode=disable"))
	testdb.CheckMigrateEndsSoonAfterItsContext(t, s.Migrate)
}
