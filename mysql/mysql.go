// Package mysql is the [leadership.Store] for MySQL 8.0+ and MariaDB 10.6+
// on github.com/go-sql-driver/mysql, for fleets whose shared database is
// MySQL.
//
//	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/app")
//	store, err := mysql.New(db)
//	flag, err := leadership.NewFlag().Store(store).Name("nightly-report").Build(ctx)
//
// # Statements and clock
//
// Acquire-or-renew is one round trip (in routine mode, the default; see
// Statement mode): CALL leadership_acquire(…), a stored
// procedure the migrations create, runs one INSERT … ON DUPLICATE KEY
// UPDATE whose assignments change the row only when it is held by the
// caller's term or expired, reports the outcome through LAST_INSERT_ID,
// commits, and returns the row, so a losing attempt learns who holds the
// flag and until when. MySQL has no INSERT … RETURNING and MariaDB has none for the update
// of an upsert, hence the procedure. The statement is right whether or not
// MariaDB's SIMULTANEOUS_ASSIGNMENT sql mode is on. The store prepares the
// CALL once and database/sql keeps it on each connection (one prepared
// statement per connection of db), so an attempt is one round trip without
// interpolateParams too.
//
// Instants are integer microseconds since the Unix epoch read from
// UTC_TIMESTAMP(6) inside the statement, which starts after the client
// sent it: the ordering the flag's trust window relies on.
//
// # DSN
//
// The store needs no DSN parameter: it reads no DATETIME column, so
// parseTime and loc do not matter, and UTC_TIMESTAMP makes the session
// time_zone irrelevant; clientFoundRows, interpolateParams and
// multiStatements do not matter either. The tests run it with several of
// these settings.
//
// # Autocommit
//
// Every statement that writes is committed before its reply is trusted,
// whatever the session's autocommit (autocommit=0 in the DSN, which the
// driver sends as SET autocommit=0; init_connect='SET autocommit=0'; a
// global autocommit=0). Without autocommit a write would stay in an open
// transaction on a pooled connection: a term the caller trusts could be
// rolled back when that connection closes, and another process would then
// get the same token, while the open transaction kept the row locked
// against everyone else. So the procedure runs its work in a transaction
// of its own and commits it before it sends the row (one round trip still,
// no check of @@autocommit needed), [Store.Release] and [Store.Evict] run
// their UPDATE in a transaction they commit, reads run in a read-only
// transaction (so they never see a snapshot an earlier statement left
// open), and [Store.Migrate] turns autocommit on for golang-migrate's
// connection and back off afterwards. The store runs only on connections of
// the pool, never inside a caller's transaction (database/sql lends no
// connection with an open transaction), but in a session without autocommit
// it commits whatever that session had left uncommitted. Acquire refuses a
// procedure older than schema version 4, which did not commit.
//
// # Statement mode
//
// Some MySQL-compatible services have no stored routines (PlanetScale,
// TiDB, sharded Vitess keyspaces), and some servers refuse to create one
// for the application's user. With [WithoutRoutines] the store sends the
// procedure's upsert as a plain statement, in a transaction of its own
// with the read of its outcome (START TRANSACTION, upsert, SELECT of
// LAST_INSERT_ID() and the row, COMMIT): four round trips per attempt
// instead of one, the same outcome, committed before the reply is
// trusted whatever the session's autocommit. [Store.Migrate] then creates
// no routine: it applies the same migration versions, with those that
// create or drop the procedure replaced by a statement that changes
// nothing, so a database can change modes; in routine mode Migrate
// creates the procedure when it is missing. A multi-statement batch would
// save round trips but needs multiStatements and interpolateParams in the
// DSN, and a batch that fails half-way leaves its transaction open; the
// store does not depend on either.
//
// # Schema and privileges
//
// The table leadership_flags, the procedure leadership_acquire (routine
// mode only) and golang-migrate's version table
// leadership_schema_migrations live in the connection's database. In
// routine mode [Store.Migrate] needs CREATE, ALTER ROUTINE and CREATE
// ROUTINE there; when an administrator applied the migrations, the
// application user needs SELECT, INSERT, UPDATE on leadership_flags,
// EXECUTE on the procedure and SELECT on leadership_schema_migrations. In
// statement mode Migrate needs CREATE and SELECT, INSERT, UPDATE, DELETE on
// the database's tables, and the application user SELECT, INSERT, UPDATE
// on leadership_flags and SELECT on leadership_schema_migrations. Errors
// from a server that refuses the procedure (1418, 1419, 1227 and other
// denials) name the privilege, log_bin_trust_function_creators, and
// statement mode. The procedure runs with the caller's privileges (SQL
// SECURITY INVOKER).
// Schema version 4 drops and re-creates the procedure (MySQL has no CREATE
// OR REPLACE PROCEDURE), which drops an EXECUTE granted on it by name:
// grant it again after migrating, or grant EXECUTE on the database.
//
// # Release notifications
//
// MySQL has no LISTEN/NOTIFY: flags of other processes learn of a release
// at their next poll. Flags of the same process on one Store are woken at
// once.
package mysql

import (
	"database/sql"
	"fmt"
	"sync"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/notify"
	"github.com/dbflag/leadership/internal/schema"
)

// Store is the MySQL/MariaDB store. It is safe for concurrent use; create
// it with [New].
type Store struct {
	db         *sql.DB
	hub        notify.Hub
	migrated   schema.Once
	noRoutines bool // statement mode: see WithoutRoutines

	mu      sync.Mutex
	acquire *sql.Stmt // the CALL of Acquire, prepared at its first use
	stmts   prepared  // statement mode: prepared at their first use
}

var (
	_ leadership.Store           = (*Store)(nil)
	_ leadership.ReleaseNotifier = (*Store)(nil)
	_ leadership.SchemaVersioner = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithoutRoutines selects statement mode, for servers that have no stored
// routines (PlanetScale, TiDB, sharded Vitess keyspaces) or refuse to
// create one for the user (binary logging without
// log_bin_trust_function_creators: errors 1418 and 1419). Acquire then
// sends the upsert of the procedure as plain statements in a short
// transaction of its own (START TRANSACTION, the upsert, a read of the row
// and of LAST_INSERT_ID, COMMIT): four round trips instead of one, with the
// same outcome, committed before the reply is trusted whatever the
// session's autocommit. The application user needs only SELECT, INSERT,
// UPDATE on leadership_flags (and SELECT on leadership_schema_migrations),
// and [Store.Migrate] creates no routine. Both modes work on one database
// at once: a database migrated in statement mode gets the procedure at the
// first Migrate in routine mode.
func WithoutRoutines() Option { return func(s *Store) { s.noRoutines = true } }

// New returns a store on db, a database opened with the "mysql" driver of
// github.com/go-sql-driver/mysql. It never closes db. The schema is applied
// by [Store.Migrate], which [leadership.FlagBuilder.Build] calls by default.
func New(db *sql.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mysql.New: db is nil", leadership.ErrInvalidArgument)
	}
	s := &Store{db: db}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}
