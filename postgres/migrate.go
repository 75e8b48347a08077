package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	mdatabase "github.com/golang-migrate/migrate/v4/database"
	mpgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/jackc/pgx/v5"

	"github.com/dbflag/leadership/internal/schema"
	"github.com/dbflag/leadership/internal/sqlstore"
	"github.com/dbflag/leadership/migrations"
)

// Migrate checks the server version, applies the embedded migrations with
// golang-migrate into the table [migrations.MigrationsTable] of the current
// schema, then checks the flag table's shape. A server older than
// PostgreSQL 13 is refused, with an error naming its version, before
// anything is created. Concurrent calls from many processes are serialized
// by golang-migrate's advisory lock, a session-level lock that a pooler in
// transaction mode cannot keep on one session (see docs/operations.md,
// "PostgreSQL behind a pooler"). A call whose ctx ends while it waits for
// that lock returns ctx's error, naming the server process that holds it
// (golang-migrate itself waits without a context); a migration that has
// begun runs to its end, as cutting it would leave the schema dirty.
// Once a call has succeeded, later calls on the same Store return nil
// without touching the database, so building many flags on one store
// migrates once. It never closes the pool.
func (s *Store) Migrate(ctx context.Context) error {
	return s.namingTheLockHolder(ctx, s.migrated.Do(ctx, s.applyMigrations))
}

// namingTheLockHolder adds to err, Migrate's error, the server processes
// holding the migration lock, if err came with ctx's end before Migrate
// waited for the lock (on a slow server, or while another Migrate of this
// store ran) and any do: they are then still why Migrate could not
// finish. The lookup takes a second at most (a server that does not
// answer). An error of the wait itself names them already.
func (s *Store) namingTheLockHolder(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, errMigrationLockWait) {
		return err
	}
	if holders, ok := s.migrationLockHolders(); ok {
		switch {
		case err == ctx.Err(): // Migrate's context ended before it began
			err = fmt.Errorf("postgres: migrate: %w", err)
		case !errors.Is(err, ctx.Err()):
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return fmt.Errorf("%w; meanwhile %s held the migration lock, which Migrate waits for (another process migrating, or a stopped `leadership migrate`: pg_stat_activity tells which)", err, holders)
	}
	return err
}

func (s *Store) applyMigrations(ctx context.Context) error {
	// golang-migrate's pgx driver keeps a connection it took out of the pool
	// when it fails to create its version table, and that connection would
	// keep pool.Close from returning; so the usual reasons it fails (a
	// missing privilege, a read-only session) are caught here first.
	var (
		schema                    *string
		canCreate, have, readOnly bool
		version                   string
		versionNum                int
	)
	err := s.pool.QueryRow(ctx, `SELECT current_schema(),
    coalesce(has_schema_privilege(current_schema(), 'CREATE'), false),
    to_regclass('`+migrations.MigrationsTable+`') IS NOT NULL,
    current_setting('transaction_read_only') = 'on',
    current_setting('server_version'), current_setting('server_version_num')::int`).Scan(&schema, &canCreate, &have, &readOnly, &version, &versionNum)
	if err != nil {
		return describe("connect", err)
	}
	if versionNum < oldestSupported*10000 {
		return fmt.Errorf("postgres: server PostgreSQL %s is too old: PostgreSQL %d or later is needed (the migrations and the acquire statement call gen_random_uuid(), built in from 13)", version, oldestSupported)
	}
	if readOnly {
		return fmt.Errorf("postgres: apply migrations: %s", readOnlyFix)
	}
	if schema == nil {
		return errors.New("postgres: no schema to migrate into: no schema of the search_path exists or the role lacks USAGE on it; set search_path in the DSN to an existing schema the role may use")
	}
	if err := s.checkGrants(ctx); err != nil {
		return err
	}
	if !canCreate && !have {
		return fmt.Errorf("postgres: apply migrations: the role needs CREATE on schema %q (or let an administrator apply the migrations and build flags with Migrate(false))", *schema)
	}
	if err := s.migrate(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("postgres: apply migrations: %w: %w", ctx.Err(), err)
		}
		// golang-migrate wraps the statements' errors in a database.Error
		// that does not unwrap, so its text is read too.
		if sqlState(err) == codeInsufficientPrivilege || strings.Contains(err.Error(), "permission denied") {
			return fmt.Errorf("postgres: apply migrations: permission denied: the role needs CREATE on the schema (or let an administrator apply the migrations and build flags with Migrate(false)): %w", err)
		}
		return fmt.Errorf("postgres: apply migrations: %w", err)
	}
	return s.checkShape(ctx)
}

// oldestSupported is the oldest PostgreSQL major the store supports and is
// tested on; [Store.Migrate] refuses older servers.
const oldestSupported = 13

func (s *Store) migrate(ctx context.Context) error {
	// A *sql.DB over the pool: closing it (the driver's Close does) leaves
	// the pool open; giveBack returns what golang-migrate kept.
	db, taken, giveBack := migrationDB(ctx, s.pool)
	defer giveBack()
	// WithInstance takes golang-migrate's lock too, to create its table.
	drv, err := mpgx.WithInstance(db, &mpgx.Config{MigrationsTable: migrations.MigrationsTable})
	if err == nil {
		err = schema.Apply("postgres", "pgx5", drv)
	} else {
		db.Close()
	}
	if err != nil && taken.cut.Load() {
		holders, ok := s.migrationLockHolders()
		if !ok {
			holders = "another session"
		}
		return fmt.Errorf("%w, which %s held (another process migrating, or a stopped `leadership migrate`: pg_stat_activity tells which)",
			errMigrationLockWait, holders)
	}
	return err
}

// errMigrationLockWait is the error of a Migrate whose context ended while
// it waited for golang-migrate's lock.
var errMigrationLockWait = errors.New("gave up waiting for the migration lock")

// migrationLockHolders names the server processes that hold
// golang-migrate's lock in the current database and schema ("the server
// process 123"), and reports whether it found any. It takes a second at
// most: Migrate's context has ended.
func (s *Store) migrationLockHolders() (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var database, schema, pids string
	if err := s.pool.QueryRow(ctx, `SELECT current_database(), current_schema()`).Scan(&database, &schema); err != nil {
		return "", false
	}
	key, err := mdatabase.GenerateAdvisoryLockId(database, schema, migrations.MigrationsTable) // as golang-migrate's key
	if err != nil {
		return "", false
	}
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(string_agg(pid::text, ', '), '') FROM pg_locks
WHERE locktype = 'advisory' AND granted AND classid = 0 AND objid = $1::bigint::oid AND objsubid = 1
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, key).Scan(&pids); err != nil || pids == "" {
		return "", false
	}
	return "the server process " + pids, true
}

// checkShape fails with a clear message when leadership_flags in the
// current schema lacks a column the store needs or has it with another
// type (for example, a table made by hand).
func (s *Store) checkShape(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, `
SELECT column_name, data_type FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = 'leadership_flags'`)
	if err != nil {
		return describe("check table shape", err)
	}
	got, err := sqlstore.Columns(rows)
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return describe("check table shape", err)
	}
	if err := schema.Check("postgres", got, [][2]string{
		{"name", "text"}, {"holder", "text"}, {"version", "bigint"},
		{"renewed_at", "timestamp with time zone"}, {"expires_at", "timestamp with time zone"},
	}); err != nil {
		return err
	}
	// The failover guard's record: the acquire statement reads it, and
	// without it no flag would ever be acquired.
	var guards int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM leadership_guard WHERE id = 1`).Scan(&guards); err != nil {
		return describe("check the guard record", err)
	}
	if guards != 1 {
		return fmt.Errorf("postgres: %w", errGuardMissing)
	}
	return nil
}

// SchemaVersion reports the version of the applied migrations and whether
// one failed half-way (dirty), from golang-migrate's table in the current
// schema; 0 when none was applied.
func (s *Store) SchemaVersion(ctx context.Context) (version uint, dirty bool, err error) {
	version, dirty, err = sqlstore.Version(func(dest ...any) error {
		return s.pool.QueryRow(ctx, `SELECT version, dirty FROM `+migrations.MigrationsTable+` LIMIT 1`).Scan(dest...)
	}, func(err error) bool { return sqlState(err) == codeUndefinedTable || errors.Is(err, pgx.ErrNoRows) })
	if err != nil {
		return 0, false, describe("read schema version", err)
	}
	return version, dirty, nil
}
