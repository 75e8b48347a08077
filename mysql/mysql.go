// Package mysql is the [leadership.Store] for MySQL 8.0+ and MariaDB 10.6+
// on github.com/go-sql-driver/mysql (which it registers), for fleets whose
// shared database is MySQL.
//
//	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/app")
//	store, err := mysql.New(db)
//	flag, err := leadership.NewFlag().Store(store).Name("nightly-report").Build(ctx)
//
// The store needs no DSN parameter: instants are integer microseconds of
// UTC_TIMESTAMP(6) read inside each statement, so parseTime, loc and the
// session time_zone do not matter. Every write is committed before its
// reply is trusted, whatever the session's autocommit. [New] never closes
// db; [Store.Close] closes the connections the store took from it for its
// notifications.
//
// # Statements
//
// In routine mode, the default, an attempt is one round trip: CALL
// leadership_acquire(…), a procedure the migrations create, runs one
// conditional INSERT … ON DUPLICATE KEY UPDATE, commits, and returns the
// row, so a losing attempt learns who holds the flag and until when. The
// attempts of flags of one Store that are due together ([Store.MaxAcquireBatch])
// go out as one CALL leadership_acquire_many(…), one transaction for up to
// 512. With [WithoutRoutines] (statement mode: for PlanetScale, TiDB,
// Vitess, or a user who may not create routines) the same work is six
// statements in a transaction of the store's own, and a batch of up to 32
// attempts is one transaction; [Store.Migrate] then creates no routine.
//
// Both modes implement the failover guard of the repository's
// docs/failover.md. The server's incarnation is @@server_id and a UUID()
// in the MEMORY table leadership_incarnation, which every server start
// empties: every restart, clean ones included, is a new incarnation, and
// new terms wait one longest lease after it (live holders renew at once).
// A primary demoted and promoted again without a restart keeps its
// incarnation: restart it first, or run leadership quarantine
// ([Store.Quarantine]) in the promotion hook.
//
// Releases due together (a process closing its flags at once) travel
// likewise, in both modes: up to 512 in one transaction that locks their
// rows in the order of the names and ends, in one UPDATE, the terms the
// releases name, each as a release alone would.
//
// # Schema and privileges
//
// The tables leadership_flags, leadership_guard and leadership_incarnation,
// the procedures leadership_acquire and leadership_acquire_many (routine
// mode) and golang-migrate's table leadership_schema_migrations live in the
// connection's database. [Store.Migrate] needs CREATE, CREATE ROUTINE and
// ALTER ROUTINE there (statement mode: CREATE, and SELECT, INSERT, UPDATE,
// DELETE). When an administrator applied the migrations, the application
// needs SELECT, INSERT, UPDATE on leadership_flags; SELECT, UPDATE on
// leadership_guard; SELECT, INSERT on leadership_incarnation; SELECT on
// leadership_schema_migrations; and, in routine mode, EXECUTE on both
// procedures. Migrate checks each and names the GRANT that is missing,
// and, in routine mode while a migration that drops and re-creates the
// procedures is pending, CREATE ROUTINE and ALTER ROUTINE.
// Schema versions 4, 9 and 14 re-create leadership_acquire, and 16
// leadership_acquire_many, which drops an EXECUTE granted on it by name:
// grant it again after migrating. In routine mode a Store refuses to
// acquire, naming leadership migrate, until it has seen the schema at
// version 16 (not dirty), whose procedures keep the failover guard's
// promises; it reads the version once, at its first attempt. A
// read-only server (errors 1290, 1792, 1836) fails attempts with an error
// that says to connect to the primary with rejectReadOnly=true.
//
// # Release notifications
//
// Releases wake the flags of the same Store at once. Flags of other
// processes are woken by a hint carried by user-level locks (GET_LOCK):
// the store leading under a holder name holds that name's bell and rings
// it right after each [Store.Release]; a follower store waits on the bells
// of up to four holder names its flags lost to, on a connection each, and
// wakes the flags whose row has become free. The hint can be lost (a fifth
// holder name, a failed connection, a bell someone else took first, a
// rolling upgrade), so flags keep polling at most every 2 s: the store
// does not report notifications that reach every process, and
// [Store.HintsOtherProcesses] reports whether a waiter waits on a held
// bell. Neither bells nor waiters run on a pool of fewer than three
// connections.
//
// What each statement does, the guard's limits (Galera, equal
// server_ids), the costs of the bells and every case where a hint is lost
// are in the repository's docs/stores.md.
package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/notify"
	"github.com/dbflag/leadership/internal/schema"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// Store is the MySQL/MariaDB store. It is safe for concurrent use; create
// it with [New].
type Store struct {
	db         *sql.DB
	hub        notify.Hub
	migrated   schema.Once
	noRoutines bool // statement mode: see WithoutRoutines
	// schemaChecked: the schema has the procedures routine mode needs
	// (checkSchema).
	schemaChecked atomic.Bool
	schemaGate    chan struct{} // one checkSchema reads at a time

	acquires *sqlstore.Acquires      // batch.go
	releases *sqlstore.Releases      // batch.go
	ticks    leadership.RenewalTicks // batch.go
	// manyMissingUntil (Unix nanoseconds): until then, batches are sent
	// one CALL per request, leadership_acquire_many having been found
	// missing or not executable.
	manyMissingUntil atomic.Int64
	// callPerFlag sends every batch one CALL per request (a test hook,
	// for the benchmark's comparison).
	callPerFlag bool

	mu              sync.Mutex
	acquireStmt     *sql.Stmt // CALL leadership_acquire, prepared at its first use
	acquireManyStmt *sql.Stmt // CALL leadership_acquire_many, likewise
	stmts           prepared  // statement mode: prepared at their first use

	// Release notifications across processes (notify.go). The hub runs
	// the waiters; the bell's goroutine and its state are under pmu.
	ctx      context.Context // ends at Close
	cancel   context.CancelFunc
	pmu      sync.Mutex
	closed   bool
	leading  map[term]time.Time // terms led → end of their lease (local clock)
	rings    map[string]bool    // holder names whose bells to ring
	bellOn   bool               // the bell's goroutine runs
	bellKick chan struct{}      // wakes it
	running  sync.WaitGroup     // the bell's goroutine, waited for by Close
	waiting  atomic.Int32       // waiters' GET_LOCK in flight: HintsOtherProcesses

	watchStatements atomic.Int64 // statements of the waiters, for tests
}

var (
	_ leadership.Store           = (*Store)(nil)
	_ leadership.ReleaseNotifier = (*Store)(nil)
	_ leadership.AcquireBatcher  = (*Store)(nil)
	_ leadership.SchemaVersioner = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithoutRoutines selects statement mode, for servers that have no stored
// routines (PlanetScale, TiDB, sharded Vitess keyspaces) or refuse to
// create one for the user (binary logging without
// log_bin_trust_function_creators: errors 1418 and 1419). Acquire then
// sends the work of the procedure as plain statements in a short
// transaction of its own (START TRANSACTION, the read of the failover
// guard, the upsert, a read of the row and of LAST_INSERT_ID, the guard's
// locked re-read, COMMIT): six round trips instead of one, with the same
// outcome, committed before
// the reply is trusted whatever the session's autocommit. The application
// user needs no routine privilege (see Schema and privileges), and
// [Store.Migrate] creates no routine. Both modes work on one database
// at once: a database migrated in statement mode gets the procedures at the
// first Migrate in routine mode, which also replaces older ones; Migrate in
// statement mode refuses to skip the replacement of procedures it can see.
func WithoutRoutines() Option { return func(s *Store) { s.noRoutines = true } }

// New returns a store on db, a database opened with the "mysql" driver of
// github.com/go-sql-driver/mysql. It never closes db. The schema is applied
// by [Store.Migrate], which [leadership.FlagBuilder.Build] calls by default.
func New(db *sql.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mysql.New: db is nil", leadership.ErrInvalidArgument)
	}
	s := &Store{db: db, leading: make(map[term]time.Time), rings: make(map[string]bool), bellKick: make(chan struct{}, 1), schemaGate: make(chan struct{}, 1)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.hub.Watch, s.hub.Room = s.follow, s.waiterRoom
	for _, o := range opts {
		o(s)
	}
	s.newBatchers()
	return s, nil
}

// Close stops the store's bells and waiters (see Release notifications)
// and closes their connections without returning them to db's pool (a
// connection may hold a bell or wait for one, which only closing it
// ends): db opens others as it needs. It never closes db, and the store
// keeps working without them: flags of other processes then learn of
// this store's releases at their next poll. A store left unclosed stops
// them anyway once its flags are closed and their terms released or past
// their lease.
func (s *Store) Close() error {
	s.pmu.Lock()
	s.closed = true
	s.pmu.Unlock()
	s.cancel()
	s.hub.Close()
	s.running.Wait()
	return nil
}
