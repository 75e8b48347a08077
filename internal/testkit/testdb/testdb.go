// Package testdb finds the database servers that integration tests run
// against: a DSN from the environment first, then a container started with
// testcontainers-go when a Docker engine answers, else the test is skipped
// with a message saying how to enable it — or fails, when
// LEADERSHIP_TEST_REQUIRE_DB=1 (set by .ci/run), so that CI never counts a
// skipped database suite as passing.
package testdb

import (
	"os"
	"testing"
)

// Environment variables read by the discovery.
const (
	// EnvRequire, when "1", turns a missing database into a test failure.
	EnvRequire = "LEADERSHIP_TEST_REQUIRE_DB"
	// EnvPostgres holds a PostgreSQL DSN (postgres://…).
	EnvPostgres = "LEADERSHIP_TEST_POSTGRES_DSN"
	// EnvMySQL holds a MySQL or MariaDB DSN in go-sql-driver form
	// (user:pass@tcp(host:port)/db).
	EnvMySQL = "LEADERSHIP_TEST_MYSQL_DSN"
	// EnvPgBouncer holds the DSN of a PgBouncer in transaction pooling
	// mode in front of the server of EnvPostgres, logging in as the same
	// user (scripts/test-databases.sh starts one). Its database name with
	// "_single" appended must name the same database through a pool of one
	// server connection.
	EnvPgBouncer = "LEADERSHIP_TEST_PGBOUNCER_DSN"
)

// PgBouncer returns LEADERSHIP_TEST_PGBOUNCER_DSN, else it skips or fails
// t (see [Unavailable]): no container is started for it.
func PgBouncer(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvPgBouncer)
	if dsn == "" {
		Unavailable(t, "PgBouncer", EnvPgBouncer, EnvPgBouncer+" is not set")
	}
	return dsn
}

// Required reports whether a missing database must fail the tests.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Unavailable ends the test because the database what cannot be reached:
// a failure when [Required], else a skip. Both say how to provide one.
func Unavailable(t testing.TB, what, envVar, why string) {
	t.Helper()
	msg := what + " unavailable (" + why + "): set " + envVar +
		", or run `eval \"$(scripts/test-databases.sh)\"` (Debian, root), or start a Docker engine for testcontainers-go"
	if Required() {
		t.Fatalf("%s; %s=1 requires it", msg, EnvRequire)
	}
	t.Skip(msg)
}
