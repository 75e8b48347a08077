package postgres_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/migrations"
)

// TestAFailedMigrationLeavesThePoolClosable: when golang-migrate fails
// after taking a connection of the pool (here its session lock times out:
// another session holds it, and the DSN sets a statement_timeout), Migrate
// returns the error and pool.Close still returns; golang-migrate keeps
// such a connection, and pool.Close used to wait for it forever.
func TestAFailedMigrationLeavesThePoolClosable(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	admin := newPool(t, dsn)
	ctx := context.Background()
	if err := newStore(t, admin).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// Hold golang-migrate's lock, as a migration running elsewhere does.
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	lockID, err := database.GenerateAdvisoryLockId(strings.TrimPrefix(u.Path, "/"), u.Query().Get("search_path"), migrations.MigrationsTable)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockID); err != nil {
		t.Fatal(err)
	}
	defer holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lockID) //nolint:errcheck // released with the connection anyway

	pool, err := pgxpool.New(ctx, withParam(t, dsn, "statement_timeout", "300"))
	if err != nil {
		t.Fatal(err)
	}
	if err := newStore(t, pool).Migrate(ctx); err == nil || !strings.Contains(err.Error(), "statement timeout") {
		t.Fatalf("Migrate while another session holds the migration lock = %v, want the statement timeout", err)
	}
	closed := make(chan struct{})
	go func() { pool.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("pool.Close still waits 10 s after a failed Migrate")
	}
}
