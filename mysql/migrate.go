package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	mmysql "github.com/golang-migrate/migrate/v4/database/mysql"

	"github.com/dbflag/leadership/internal/schema"
	"github.com/dbflag/leadership/internal/sqlstore"
	"github.com/dbflag/leadership/migrations"
)

// Migrate checks the server version, applies the embedded migrations with
// golang-migrate into the table [migrations.MigrationsTable] of the
// connection's database, then checks the flag table's shape and, in
// routine mode, creates the procedures if a statement-mode Migrate left
// them out. It refuses, before and after the migrations, a
// leadership_incarnation table that is not or would not be MEMORY
// (MariaDB's enforce_storage_engine), naming the fix. In statement mode ([WithoutRoutines]) the migrations that
// create or drop a procedure are applied as statements that change nothing, under
// the same versions, so no routine privilege is needed. Concurrent
// calls from many processes are serialized by golang-migrate's GET_LOCK;
// a call whose ctx ends while another session holds it returns ctx's
// error, naming that session.
// It never closes db: golang-migrate gets a connection of its own, closed
// afterwards. Once a call has succeeded, later calls on the same Store
// return nil without touching the database.
func (s *Store) Migrate(ctx context.Context) error {
	return s.namingTheLockHolder(ctx, s.migrated.Do(ctx, s.applyMigrations))
}

// namingTheLockHolder adds to err, Migrate's error, the session holding
// the migration lock, if err came with ctx's end before Migrate waited for
// the lock (on a slow server, or while another Migrate of this store ran)
// and one does: it is then still why Migrate could not finish. The lookup
// takes a second at most (a server that does not answer). An error of
// the wait itself names the holder already.
func (s *Store) namingTheLockHolder(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, errMigrationLockWait) {
		return err
	}
	lookup, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	var db string
	if lookupErr := s.db.QueryRowContext(lookup, `SELECT DATABASE()`).Scan(&db); lookupErr != nil {
		return err
	}
	if holder, lookupErr := migrationLockHolder(lookup, s.db, db); lookupErr == nil && holder.Valid {
		switch {
		case err == ctx.Err(): // Migrate's context ended before it began
			err = fmt.Errorf("mysql: migrate: %w", err)
		case !errors.Is(err, ctx.Err()):
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return fmt.Errorf("%w; meanwhile the connection %d held the migration lock, which Migrate waits for %s", err, holder.Int64, migrationLockHolderHint)
	}
	return err
}

func (s *Store) applyMigrations(ctx context.Context) error {
	var version string
	if err := s.db.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		return describe("connect", err)
	}
	if err := checkVersion(version); err != nil {
		return err
	}
	if err := s.checkGrants(ctx); err != nil {
		return err
	}
	if err := s.checkRoutineMigrations(ctx); err != nil {
		return err
	}
	if err := s.checkIncarnationEngine(ctx); err != nil {
		return err
	}
	if err := s.migrate(ctx); err != nil {
		return s.describeMigrate("apply migrations", err)
	}
	if err := s.checkShape(ctx); err != nil {
		return err
	}
	if err := s.checkIncarnationEngine(ctx); err != nil {
		return err
	}
	if s.noRoutines {
		return nil
	}
	if err := s.ensureRoutines(ctx); err != nil {
		return s.describeMigrate("create the procedures", err)
	}
	s.schemaChecked.Store(true)
	return nil
}

// routineSchema is the schema version whose procedures routine mode
// needs: those of migrations 0014 and 0016, which re-read the failover
// guard under a lock before they commit (no term starts after a
// Quarantine returned) and let a row at the largest version fail alone.
// Their replies have the shape of those of 0009 and 0012, so the store
// reads the version instead (checkSchema).
const routineSchema = 16

// checkSchema fails, in routine mode, until the store has seen the schema
// at routineSchema or later and not marked dirty, naming the fix: a store
// built with Migrate(false) whose administrator has not applied the
// migrations yet, or after one failed half-way, would otherwise call
// older procedures without knowing. It reads the version once per store
// (again after a failure); a Migrate that succeeded on the store stands
// for it. Statement mode runs no procedure and needs no check.
func (s *Store) checkSchema(ctx context.Context) error {
	if s.noRoutines || s.schemaChecked.Load() {
		return nil
	}
	// One read at a time: the first attempts of many flags (a process
	// starting them together) wait for it, instead of each taking a
	// connection of the pool outside the batches.
	select {
	case s.schemaGate <- struct{}{}:
	case <-ctx.Done():
		return describe("read schema version", ctx.Err())
	}
	defer func() { <-s.schemaGate }()
	if s.schemaChecked.Load() {
		return nil
	}
	version, dirty, err := s.SchemaVersion(ctx)
	switch {
	case err != nil:
		return err
	case dirty:
		return fmt.Errorf("mysql: %w", schema.Dirty("mysql", version))
	case version < routineSchema:
		return fmt.Errorf("mysql: the schema is at version %d, and routine mode needs version %d, whose procedures keep the failover guard's promises "+
			"(no term starts after a quarantine returned): apply the migrations (leadership migrate, or Build without Migrate(false)), %s",
			version, routineSchema, statementModeHint)
	}
	s.schemaChecked.Store(true)
	return nil
}

// statementModeHint names statement mode, the way around every refusal to
// create a routine.
const statementModeHint = "or use statement mode, which needs no routine (mysql.WithoutRoutines(); routines=false in a mysql:// DSN of the leadership command)"

// describeMigrate is describe for Migrate's errors, naming the privileges
// the mode needs. golang-migrate wraps the statements' errors in a
// database.Error that does not unwrap, so the error number is also read
// from its text.
func (s *Store) describeMigrate(what string, err error) error {
	n := number(err)
	if m := errNumberRE.FindStringSubmatch(err.Error()); n == 0 && m != nil {
		v, _ := strconv.Atoi(m[1])
		n = uint16(v)
	}
	switch {
	case n == errBinlogUnsafeRoutine || n == errBinlogCreateRoutineNeedSuper:
		return fmt.Errorf("mysql: %s: the server has binary logging on and refuses to create the procedure leadership_acquire for this user: "+
			"set the global log_bin_trust_function_creators = 1 (on a managed server, in its parameter group), or grant the user SUPER, %s: %w", what, statementModeHint, err)
	case n == errTableAccessDenied || n == errDBAccessDenied || n == errSpecificDenied || n == errProcAccessDenied || strings.Contains(err.Error(), "denied"):
		if s.noRoutines {
			return fmt.Errorf("mysql: %s: permission denied: the user needs CREATE on the database and SELECT, INSERT, UPDATE, DELETE on its tables "+
				"(or let an administrator apply the migrations and build flags with Migrate(false)): %w", what, err)
		}
		return fmt.Errorf("mysql: %s: permission denied: the user needs CREATE, CREATE ROUTINE and ALTER ROUTINE on the database "+
			"(and, for a DEFINER other than itself, SET USER or SUPER), or let an administrator apply the migrations and build flags with Migrate(false), %s: %w", what, statementModeHint, err)
	}
	return describe(what, err)
}

var errNumberRE = regexp.MustCompile(`\bError (\d{4})\b`)

// ensureRoutines creates the procedures that are missing when the
// migrations are applied (the database was migrated in statement mode,
// whose migrations skip routines: see statementFS), and replaces those
// older than the newest migration that creates them, which such a
// database can have (one migrated before statement mode refused to skip
// their replacement: checkRoutineMigrations); a procedure whose
// definition the user cannot see is taken as it is. Two processes may do
// it at once; the one that finds it done by the other is content.
func (s *Store) ensureRoutines(ctx context.Context) error {
	for _, r := range routines {
		var (
			n          int
			definition sql.NullString
		)
		if err := s.inTx(ctx, true, func(tx *sql.Tx) error {
			return tx.QueryRowContext(ctx, `SELECT COUNT(*), MAX(routine_definition) FROM information_schema.routines
WHERE routine_schema = DATABASE() AND routine_name = ?`, r.name).Scan(&n, &definition)
		}); err != nil {
			return fmt.Errorf("look for the procedure %s: %w", r.name, err)
		}
		if n > 0 && (!definition.Valid || strings.Contains(definition.String, r.marker)) {
			continue
		}
		if n > 0 {
			// Dropped only once a probe shows that it can be created again:
			// a user who may drop but not create a procedure (or a server
			// that refuses routines to it) would leave the schema without it.
			const older = "replace the procedure %s, older than the schema's (it does not re-read the failover guard), left as it is: "
			if createErr, dropErr := s.createProbe(ctx); createErr != nil || dropErr != nil {
				return fmt.Errorf(older+"the user cannot create a procedure: %w", r.name, errors.Join(createErr, dropErr))
			}
			if _, err := s.db.ExecContext(ctx, "DROP PROCEDURE "+r.name); err != nil && number(err) != errSPDoesNotExist {
				return fmt.Errorf(older+"the user cannot drop it (it needs ALTER ROUTINE): %w", r.name, err)
			}
		}
		body, err := migrations.FS.ReadFile(r.migration)
		if err != nil {
			return err
		}
		if _, err := s.db.ExecContext(ctx, string(body)); err != nil && number(err) != errSPAlreadyExists {
			return fmt.Errorf("create the procedure %s, which the user cannot see (if it exists, grant the user EXECUTE on it): %w", r.name, err)
		}
	}
	return nil
}

// routines are the procedures of routine mode, the newest migration that
// creates each, and a name that its body has and no older body of the
// procedure has (TestEachRoutineMarkerIsItsNewestBodys): a procedure
// whose definition lacks it is older.
var routines = []struct{ name, migration, marker string }{
	{"leadership_acquire", "mysql/0014_create_rechecked_acquire.up.sql", "v_hold_now"},            // Acquire alone
	{"leadership_acquire_many", "mysql/0016_create_rechecked_batch_acquire.up.sql", "v_hold_now"}, // a batch (batch.go)
}

// checkVersion refuses servers older than MySQL 8.0 and MariaDB 10.6, the
// oldest the store is tested for.
func checkVersion(v string) error {
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return nil // unknown format: let the statements decide
	}
	if strings.Contains(strings.ToLower(v), "mariadb") {
		if major < 10 || major == 10 && minor < 6 {
			return fmt.Errorf("mysql: server %s is too old: MariaDB 10.6 or later is needed", v)
		}
		return nil
	}
	if major < 8 {
		return fmt.Errorf("mysql: server %s is too old: MySQL 8.0 or later is needed", v)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	// A connection of our own: the driver made with WithConnection closes
	// only it, never db. Each migration file holds one statement, so the
	// DSN needs no multiStatements.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	// golang-migrate needs autocommit: without it, its read of the version
	// leaves a transaction open (and reads an old snapshot if the session
	// had one), and its version update then fails to start a transaction
	// (error 1568). So autocommit is turned on for this connection, which
	// commits whatever the session had left open, and turned off again
	// before the connection returns to the pool.
	var (
		autocommit bool
		db         string
	)
	if err := conn.QueryRowContext(ctx, `SELECT @@SESSION.autocommit, DATABASE()`).Scan(&autocommit, &db); err != nil {
		conn.Close()
		return err
	}
	if !autocommit {
		if _, err := conn.ExecContext(ctx, `SET SESSION autocommit = 1`); err != nil {
			conn.Close()
			return err
		}
	}
	if err := waitForMigrationLock(ctx, conn, db); err != nil {
		if !autocommit {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SET SESSION autocommit = 0`)
		}
		conn.Close()
		return err
	}
	var drv database.Driver
	drv, err = mmysql.WithConnection(ctx, conn, &mmysql.Config{MigrationsTable: migrations.MigrationsTable})
	if err != nil {
		if !autocommit {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SET SESSION autocommit = 0`)
		}
		conn.Close()
		return err
	}
	if !autocommit {
		drv = autocommitOff{drv, conn}
	}
	if s.noRoutines {
		return schema.ApplyFS(statementFS{migrations.FS}, "mysql", "mysql", drv)
	}
	return schema.Apply("mysql", "mysql", drv)
}

// lockWaitPoll is how often waitForMigrationLock looks at the lock.
const lockWaitPoll = 50 * time.Millisecond

// waitForMigrationLock waits until golang-migrate's lock (a GET_LOCK
// named after the database db and its version table) is free. It fails,
// naming the connection that holds the lock, when ctx ends or after
// migrationLockWait: golang-migrate waits for the lock up to 10 s without
// a context, so Migrate, and Build, would otherwise outlast a shorter
// context. golang-migrate then takes the lock itself; should another
// session take it first, it waits for it as before, up to 10 s.
func waitForMigrationLock(ctx context.Context, conn *sql.Conn, db string) error {
	giveUp := time.NewTimer(migrationLockWait)
	defer giveUp.Stop()
	for {
		holder, err := migrationLockHolder(ctx, conn, db)
		if err != nil || !holder.Valid {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w, which the connection %d holds %s", ctx.Err(), errMigrationLockWait, holder.Int64, migrationLockHolderHint)
		case <-giveUp.C:
			return fmt.Errorf("gave up after %v waiting for the migration lock, which the connection %d holds %s", migrationLockWait, holder.Int64, migrationLockHolderHint)
		case <-time.After(lockWaitPoll):
		}
	}
}

// migrationLockHolder is the connection that holds golang-migrate's lock
// in the database db, or NULL.
func migrationLockHolder(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, db string) (holder sql.NullInt64, err error) {
	name, err := database.GenerateAdvisoryLockId(db + ":" + migrations.MigrationsTable) // as golang-migrate names it
	if err != nil {
		return holder, err
	}
	err = q.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, name).Scan(&holder)
	return holder, err
}

// errMigrationLockWait is the error of a Migrate whose context ended while
// it waited for golang-migrate's lock.
var errMigrationLockWait = errors.New("gave up waiting for the migration lock")

const migrationLockHolderHint = "(another process migrating, or a stopped `leadership migrate`: SHOW PROCESSLIST tells which)"

// migrationLockWait is how long waitForMigrationLock waits at most, as
// golang-migrate's GET_LOCK does.
const migrationLockWait = 10 * time.Second

// autocommitOff is golang-migrate's driver on a connection whose session
// had autocommit off: Close turns it off again before the driver returns
// the connection to the pool.
type autocommitOff struct {
	database.Driver
	conn *sql.Conn
}

func (d autocommitOff) Close() error {
	_, err := d.conn.ExecContext(context.Background(), `SET SESSION autocommit = 0`)
	return errors.Join(err, d.Driver.Close())
}

// checkShape fails with a clear message when leadership_flags lacks a
// column the store needs or has it with another type (for example, a table
// made by hand).
func (s *Store) checkShape(ctx context.Context) error {
	var got map[string]string
	err := s.inTx(ctx, true, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `
SELECT column_name, data_type FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = 'leadership_flags'`)
		if err != nil {
			return err
		}
		defer rows.Close()
		got, err = sqlstore.Columns(rows)
		return err
	})
	if err != nil {
		return describe("check table shape", err)
	}
	return schema.Check("mysql", got, [][2]string{
		{"name", "varchar"}, {"holder", "varchar"}, {"version", "bigint"}, {"renewed_at", "bigint"}, {"expires_at", "bigint"},
	})
}

// checkIncarnationEngine fails, naming the fix, when leadership_incarnation
// is not a MEMORY table (see migration 0007): the failover guard takes a
// table that the server empties when it starts for its sign of a restart,
// and any other engine keeps its rows, so the guard would never notice
// one. MariaDB's enforce_storage_engine makes CREATE TABLE … ENGINE =
// MEMORY fail (error 1290, which names NO_ENGINE_SUBSTITUTION only) or,
// with a sql_mode without NO_ENGINE_SUBSTITUTION, create the table with
// the enforced engine and a mere note (1266). So before the migrations it
// refuses a missing table under such a setting, and after them any table
// that is not MEMORY.
func (s *Store) checkIncarnationEngine(ctx context.Context) error {
	var engine, enforced sql.NullString
	err := s.inTx(ctx, true, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT (SELECT engine FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = 'leadership_incarnation')`).Scan(&engine); err != nil {
			return err
		}
		// SHOW VARIABLES, unlike @@enforce_storage_engine, also works on
		// MySQL, which has no such variable (no row).
		var name string
		err := tx.QueryRowContext(ctx, `SHOW SESSION VARIABLES LIKE 'enforce_storage_engine'`).Scan(&name, &enforced)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return describe("check the engine of leadership_incarnation", err)
	}
	setting := ""
	if enforced.Valid && enforced.String != "" && !strings.EqualFold(enforced.String, "MEMORY") {
		setting = fmt.Sprintf(" (the server has enforce_storage_engine=%s)", enforced.String)
	}
	const why = "the failover guard needs a MEMORY table, which the server empties when it starts, to notice restarts (docs/failover.md)"
	switch {
	case !engine.Valid && setting != "":
		return fmt.Errorf("mysql: cannot create leadership_incarnation as a MEMORY table%s: %s, and the server would refuse the table or give it the engine %s, "+
			"which keeps its rows: unset enforce_storage_engine while the migrations run (SET GLOBAL enforce_storage_engine = NULL; leadership migrate; "+
			"then set it back: the table stays MEMORY)", setting, why, enforced.String)
	case engine.Valid && !strings.EqualFold(engine.String, "MEMORY"):
		return fmt.Errorf("mysql: table leadership_incarnation has the engine %s, not MEMORY%s: %s, and %s keeps its rows across restarts: "+
			"with enforce_storage_engine unset (SET GLOBAL enforce_storage_engine = NULL, or SET SESSION as a user with SUPER), "+
			"run ALTER TABLE leadership_incarnation ENGINE = MEMORY", engine.String, setting, why, engine.String)
	}
	return nil
}

// SchemaVersion reports the version of the applied migrations and whether
// one failed half-way (dirty); 0 when none was applied.
func (s *Store) SchemaVersion(ctx context.Context) (version uint, dirty bool, err error) {
	version, dirty, err = sqlstore.Version(func(dest ...any) error {
		return s.inTx(ctx, true, func(tx *sql.Tx) error {
			return tx.QueryRowContext(ctx, "SELECT version, dirty FROM `"+migrations.MigrationsTable+"` LIMIT 1").Scan(dest...)
		})
	}, func(err error) bool { return number(err) == errNoSuchTable || errors.Is(err, sql.ErrNoRows) })
	if err != nil {
		return 0, false, describe("read schema version", err)
	}
	return version, dirty, nil
}
