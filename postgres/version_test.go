package postgres_test

import (
	"context"
	"os"
	"strings"
	"testing"
)

// envOldPostgres holds the DSN of a server older than the oldest supported
// major: .ci/postgres-versions sets it to PostgreSQL 12's from
// scripts/postgres-versions.sh. Unset, the test is skipped.
const envOldPostgres = "LEADERSHIP_TEST_POSTGRES_OLD_DSN"

// TestMigrateRefusesAServerOlderThan13 runs Migrate on a real PostgreSQL
// 12 (or older): it fails with an error naming the server's version and
// the oldest one supported, and leaves the schema as it was (on 12 the
// migrations would otherwise fail half-way, on gen_random_uuid(), and
// leave a dirty schema version behind).
func TestMigrateRefusesAServerOlderThan13(t *testing.T) {
	t.Parallel()
	base := os.Getenv(envOldPostgres)
	if base == "" {
		t.Skip(envOldPostgres + " is not set: run `eval \"$(scripts/postgres-versions.sh 12)\"` and set it to $LEADERSHIP_TEST_POSTGRES_DSN_12")
	}
	ctx := context.Background()
	pool := newPool(t, schemaDSN(t, base))
	var version string
	var num int
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int`).Scan(&version, &num); err != nil {
		t.Fatal(err)
	}
	if num >= 130000 {
		t.Fatalf("%s names PostgreSQL %s, which is supported: the test needs an older server", envOldPostgres, version)
	}
	err := newStore(t, pool).Migrate(ctx)
	if err == nil || !strings.Contains(err.Error(), "PostgreSQL "+version+" is too old") || !strings.Contains(err.Error(), "PostgreSQL 13 or later") {
		t.Fatalf("Migrate on PostgreSQL %s = %v, want an error that names %s as too old and 13 as the oldest supported", version, err, version)
	}
	var left []string
	if err := pool.QueryRow(ctx, `SELECT array_agg(tablename::text) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("after the refusal the schema holds %v, want nothing", left)
	}
}
