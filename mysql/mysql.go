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
// # Batches
//
// Attempts of several flags of one Store that are due while another is on
// its way travel together, and the holders of a store's flags renew at
// ticks they share ([Store.MaxAcquireBatch]), so their renewals are due
// together. In routine mode a batch of up to 512 is one CALL
// leadership_acquire_many(…) (migration 0012): the requests as a JSON
// array, decided one after the other in one transaction, each by the
// rules of leadership_acquire, with one clock reading and one read of the
// failover guard for all of them; the results come back as one JSON
// array, once the transaction has committed. So the cost per flag of many
// flags is the work of one upsert, not a round trip and a commit
// (BENCHMARKS.md §6). A hold the guard starts lasts the longest lease of
// the batch. A batch of one is CALL leadership_acquire alone. Where
// leadership_acquire_many is missing (a schema migrated by an
// administrator with an earlier release) or the user may not execute it
// (EXECUTE granted on leadership_acquire alone), the store sends a batch as
// one CALL of leadership_acquire per request and tries the new procedure
// again a minute later. In statement mode a batch of up to 32 is one
// transaction: one read of the guard, then the upsert and the read of the
// outcome of each request in turn, then the guard's locked re-read,
// between one START TRANSACTION and one COMMIT, every request decided at
// the guard read's clock.
//
// Releases due together (a process closing its flags at once) travel
// likewise, in both modes, up to 512 in one transaction: a SELECT … FOR
// UPDATE of the rows of their names, in the order of the names (as the
// acquires lock rows), one UPDATE that ends the terms the releases name,
// and the COMMIT. Each release ends only the term it names, as alone
// (BENCHMARKS.md §7). A release alone is its UPDATE in a transaction.
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
// procedure's work as plain statements, in a transaction of its own
// (START TRANSACTION, the read of the failover guard, the upsert, a SELECT
// of LAST_INSERT_ID() and the row, the guard read again under a shared
// lock, COMMIT): six round trips per attempt
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
// # Failover guard
//
// Acquire implements the guard of docs/failover.md in both modes, with the
// same rules: a database that loses acknowledged commits
// (a crash with innodb_flush_log_at_trx_commit ≠ 1, a
// failover to an asynchronous replica) never lets two processes trust a
// term at once, nor gives one token to two terms, under the assumptions
// written there. [Store.Quarantine] holds new terms by hand.
//
// The incarnation is @@server_id and a UUID() kept in the MEMORY table
// leadership_incarnation, keyed by @@server_id. A server empties its
// MEMORY tables whenever it starts, after a crash as after a clean
// shutdown, so the first acquire statement after a start finds no row for
// its server_id and inserts a new identifier; a promoted replica looks for
// its own server_id, which replication requires to differ from its
// source's, so the rows it received from its source (MEMORY rows
// replicate like others) are never its own. Reading it costs one primary
// key lookup in a MEMORY table per attempt; an unprivileged user can, with
// SELECT and INSERT on the table. Tested on MariaDB: a SIGKILL and restart
// of a server with innodb_flush_log_at_trx_commit=0 gives a new
// incarnation. Rejected: @@server_uuid (MySQL only, and it survives a
// crash), the start time from Uptime (whole seconds, read at two instants:
// it would flap), GTID positions (they do not change when nothing was
// replicated).
//
// Limits, beyond docs/failover.md's:
//
//   - Every restart, clean ones included, is a new incarnation: new terms
//     wait one longest lease after it (live holders renew at once), and
//     the version floor jumps to the clock in microseconds.
//   - A server demoted to a replica and promoted again without a restart
//     keeps its incarnation. If none of the commits of the primary it
//     replicated from in between reached it (a switchover A→B followed,
//     before any of B's binary log reached A, by a failover back to A),
//     the guard does not see them lost: restart a demoted primary before
//     it may be promoted again, or run `leadership quarantine` in the
//     promotion hook.
//   - Servers of one topology with equal server_ids (replication refuses
//     them) and engines that ignore ENGINE=MEMORY (TiDB keeps the table:
//     its commits are not lost either) are not covered.
//   - Galera and other multi-primary clusters: each node has its own
//     incarnation, so acquire statements served by different nodes take
//     each other's for a new one and hold new terms for a lease at each
//     switch; send a flag's statements to one node (as Galera's usual
//     single-writer setup does) or expect takeovers to wait.
//
// Cost while nothing fails: the procedure reads the MEMORY row and the
// guard record (a consistent read, without a lock: acquisitions of
// different flags do not wait for each other) in its one round trip, and
// the record again under a shared lock after its upserts, just before it
// commits, so that a Quarantine committed while it waited for a row lock
// is seen (it then decides again); statement mode sends these reads as
// statements of their own. The record is written only when the
// incarnation changes or a lease longer than any before is asked, under
// its row lock, after the upserts; Quarantine writes it too.
//
// # Schema and privileges
//
// The tables leadership_flags, leadership_guard (one record) and
// leadership_incarnation (MEMORY), the procedures leadership_acquire and
// leadership_acquire_many (routine mode only) and golang-migrate's version table
// leadership_schema_migrations live in the connection's database. In
// routine mode [Store.Migrate] needs CREATE, ALTER ROUTINE and CREATE
// ROUTINE there (and INSERT, for the guard's record); in statement mode
// CREATE and SELECT, INSERT, UPDATE, DELETE on the database's tables. When
// an administrator applied the migrations, the application user needs, in
// both modes, SELECT, INSERT, UPDATE on leadership_flags, SELECT, UPDATE
// on leadership_guard, SELECT, INSERT on leadership_incarnation and
// SELECT on leadership_schema_migrations, and in routine mode EXECUTE on
// the procedures (tested in statement mode with exactly these grants;
// without EXECUTE on leadership_acquire_many, batches are one CALL per
// flag). Errors from a server that refuses the procedure (1418, 1419, 1227 and
// other denials) name the privilege, log_bin_trust_function_creators, and
// statement mode. The procedure runs with the caller's privileges (SQL
// SECURITY INVOKER). Schema versions 4 and 9 drop and re-create the
// procedure (MySQL has no CREATE OR REPLACE PROCEDURE), which drops an
// EXECUTE granted on it by name: grant it again after migrating, or grant
// EXECUTE on the database. Acquire refuses the procedure of an older
// schema with an error that says to migrate.
//
// # Read-only servers
//
// A replica or a demoted primary refuses writes with error 1290
// (read_only, super_read_only), 1792 (a read-only transaction) or 1836
// (read-only mode). The error of the attempt says to connect to the
// primary and names go-sql-driver's rejectReadOnly=true, with which the
// driver drops such a connection so that the pool reconnects, through the
// failover's address, to the new primary. The flag treats it as any
// failed attempt: it never raises on it, lowers at the end of its trust
// window, and keeps trying (tested: a flag on a private server recovers
// when read_only is turned off again).
//
// # Release notifications
//
// Flags of the same Store are woken at once by its releases. MySQL has no
// LISTEN/NOTIFY; flags of other processes are woken by a hint carried by
// user-level locks (GET_LOCK; MySQL 5.7+ and MariaDB 10.0+ let one
// connection hold many):
//
//   - The bell of a holder name is a lock named after the database and
//     the holder name (a hash: lock names are limited to 64 characters).
//     While flags of a Store lead, the store holds the bells of the holder
//     names they lead under, on one connection of its pool. Right after a
//     [Store.Release] commits, it rings the holder's bell: one statement,
//     SELECT RELEASE_LOCK(bell), GET_LOCK(bell, 2), which grants the bell
//     to the waiting stores one after the other and queues the store
//     behind them, so the bell is never free between a ring and its
//     retake (RELEASE_LOCK alone after the store's last term under that
//     name). It sends nothing while nothing is released, and gives the
//     connection back once it leads nothing (its terms released, lost, or
//     past their lease without a renewal). [Store.Evict] does not ring:
//     the row cannot be taken before its expiry. The default holder name
//     is the process's ([leadership.FlagBuilder.Process]), so a process is
//     one bell. A lock is held by one connection: when two Stores of one
//     process lead under one holder name, one holds the bell and rings it
//     for the other's releases too.
//   - A waiter waits on the bell of a holder name that flags of the store
//     lost to (SELECT GET_LOCK(bell, 300) unless nobody holds it, on a
//     connection of its own): one per holder name, up to four, those most
//     flags wait on (fewer on a pool capped below six connections, so
//     that one stays for the flags' statements); a name followed is not
//     given up for one more flags wait on, and flags waiting on the names
//     beyond poll. When granted, the waiter releases the lock at once, so
//     that every waiting store is granted in turn, reads the free rows
//     (one SELECT, in autocommit mode), and wakes the flags waiting on a
//     row that has become free (a new (name, version) pair), as a release
//     in this process wakes them. A waiter stops when no flag of the
//     store waits on its holder name any more (one took the row over, saw
//     another holder, or was closed): its wait is cut short (the driver
//     closes the connection).
//
// Cost: one connection for the bells while the store leads, and one per
// holder name it follows (four at most), whatever the number of flags; an
// idle follower's store sends one statement per 5 minutes and holder name
// followed (the GET_LOCK that timed out), its flags the same polls as
// without it; a release sends one statement on the holder's side and
// three on each follower's store (RELEASE_LOCK, the SELECT of the free
// rows, the next GET_LOCK). A waiter looks at the rows at most three
// times at once (the rings of a process closing its flags, whose releases
// travel in a few batches) and then once per 0.1 s, whatever the rings.
// A bell found free (its store crashed,
// closed, or has not taken it yet) makes the waiter look at the rows (the
// store may have given its bell up right after its last release) and
// leave the bell alone for 0.1 s, then fourfold longer up to 30 s while
// it stays free, so a crashed holder costs a few statements, not a busy
// loop. A wait cut by a timeout of the client (readTimeout in the DSN) or
// of the server (max_statement_time, max_execution_time) after t makes
// later waits last half of t.
//
// The wake is a hint to attempt now, never a promise; the acquire
// statement still decides by the row and the database clock, so a bell
// that falls silent because its connection died (a crash) wakes no flag
// (the row is still held), and flags take over only after the row
// expires. User-level locks need no privilege: any user of the server can
// take a bell before its holder does, which silences it (flags poll), and
// ring a bell it took, which wakes no flag whose row has not become free,
// and costs each waiter at most nine statements at once and three per
// 0.1 s. The hint is
// lost, and flags learn of the release at their next poll, when the
// waiter was not waiting at the ring (reading the rows after the previous
// one, or pausing on a silent bell), when the store already follows four
// other holder names, when the waiter's connection has failed or the
// server refused its statement (a server restart, a network failure, a
// killed query: it tries again on a new connection after 1 s, doubling up
// to a minute), when the bell's connection failed (its store notices at
// its next ring, and takes the bell again after 0.1 s), when two
// processes lead under one holder name (only one holds its bell; the
// other tries again after 0.1 s, doubling up to a minute), and between
// this version and an earlier one, which rang other locks (during a
// rolling upgrade). Neither the bell nor a waiter runs on a pool limited
// to fewer than three connections. So the store does not report that its
// notifications reach other processes (no NotifiesOtherProcesses method),
// the default poll interval stays capped at 2 s, and
// [Store.HintsOtherProcesses] reports whether a waiter waits on a held
// bell. [Store.Close] stops the bells and the waiters and gives their
// connections back. Both modes use the same statements: no routine is
// involved. The locks live on the server the pool connects to: processes
// whose pools reach different nodes of a cluster (Galera) or a proxy that
// does not pin sessions do not hear each other's bells.
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

	acquires *sqlstore.Acquires // batch.go
	releases *sqlstore.Releases // batch.go
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
	s := &Store{db: db, leading: make(map[term]time.Time), rings: make(map[string]bool), bellKick: make(chan struct{}, 1)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.hub.Watch, s.hub.Room = s.follow, s.waiterRoom
	for _, o := range opts {
		o(s)
	}
	s.newBatchers()
	return s, nil
}

// Close stops the store's bells and waiters (see Release notifications)
// and gives their connections back. It never closes db, and the store
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
