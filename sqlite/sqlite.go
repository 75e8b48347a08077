// Package sqlite is the [leadership.Store] for SQLite, the embedded default,
// on the pure-Go driver modernc.org/sqlite (registered as "sqlite"). Several
// processes on one machine share flags through one database file.
//
// # Opening the database
//
// Open the database with [Open], which sets what concurrent use from
// several processes needs: WAL journal mode, a busy timeout (so a writer
// waits for another instead of failing at once) and immediate write
// transactions. A *sql.DB opened by other means works if its DSN sets
// these pragmas, for example
//
//	file:flags.db?_pragma=busy_timeout(10000)&_txlock=immediate
//
// after running PRAGMA journal_mode=WAL once on the file.
//
// Without a busy timeout, attempts that meet a locked database fail with
// SQLITE_BUSY and are retried by the flag: correct, but slower to fail over.
// A write of the store waits for the lock no longer than its context
// allows (a flag's attempt, its Timeout), however long the busy timeout:
// the store lowers the connection's busy timeout to the time left for the
// write and sets it back afterwards, since the driver cannot cut a busy
// handler's wait short.
//
// # Clock
//
// Every process sharing a database file runs on one host (SQLite's file
// locking does not reach across hosts), so the store judges expiry by a
// clock of the host. Each statement reads it once, through an SQL function
// this package registers with the driver, while SQLite executes the
// statement: a statement that writes reads it after it has taken the write
// lock, never before it waits for the lock.
//
//   - On Linux the clock is CLOCK_BOOTTIME. It never steps: an NTP step or
//     `date -s` moves the wall clock only, so neither ends a term early nor
//     delays failover. Like the wall clock, it counts time spent in suspend
//     (the monotonic clock that [leadership.Flag.Raised] reads does not).
//     It restarts at each boot, so each row carries the kernel's boot ID
//     (/proc/sys/kernel/random/boot_id) and a row written in an earlier
//     boot is free at once. A process in a time namespace (unshare --time)
//     reads CLOCK_BOOTTIME shifted by its namespace's offset; the store
//     takes that offset off again (/proc/self/timens_offsets), so every
//     process on the host reads one clock. [New] returns an error where it
//     cannot read these, as in a process that has called
//     unshare(CLONE_NEWTIME) and not exec'd since.
//   - On other systems the clock is the wall clock. There a forward step
//     of it larger than the flag's SafetyMargin lets a follower acquire
//     while the holder still trusts its term, and a backward step delays
//     failover by its size.
//
// The instants the store reports ([leadership.Result] Now, RenewedAt and
// ExpiresAt, and [Store.Flags]) are the host clock shifted to read as the
// wall clock: their differences are host-clock durations (a follower
// waits ExpiresAt − Now), and they follow the wall clock to within a
// second, shifting all together when it steps further.
//
// # Round trips
//
// Acquire-or-renew is one conditional INSERT … ON CONFLICT DO UPDATE …
// WHERE … RETURNING statement; when it loses, a second SELECT on the same
// in-process database reports the holder (no network round trip exists for
// SQLite). Every write commits before its result is returned: an
// eviction, a lone release or a lone acquire as a single statement on its
// own; the acquires of several flags of one Store that are due together
// (one is running while the others come due) as one transaction, BEGIN
// IMMEDIATE to COMMIT, with each statement's own result and the same
// rules per row, one commit and one wait for the write lock for all of
// them (batch.go: 64 flags renewing at once cost about 0.1 ms per renewal
// instead of 2.0 ms before batching, BenchmarkConcurrentRenewals), and so
// do the releases of flags closed together (BENCHMARKS.md §7). A connection
// that is already inside a transaction (a BEGIN in a connection hook or
// DSN pragma) is refused with an error that says so, instead of a write
// that would roll back after the caller trusted it.
//
// SQLite's write lock belongs to the process that holds it. A process
// stopped (SIGSTOP, a debugger) inside one of its writes, which hold the
// lock for about a millisecond (the commit's fsync) every renew interval,
// keeps every other process's attempts waiting until it resumes or dies:
// failover is delayed, never made unsafe, since a stopped holder's
// [leadership.Flag.Raised] turns false at the end of its trust window.
//
// # Upgrading
//
// Migration 2 adds the host-clock columns to a file made by an older
// version of this package. Rows keep their wall-clock instants too, so
// that during a rolling upgrade older processes sharing the file judge
// every row as before, and this version judges a row that an older process
// wrote last by its wall-clock expiry, as that process does (a trigger
// marks such rows). Until the last older process has stopped, a wall-clock
// step can therefore still end a term early. An older process that starts
// after the migration fails Build, since golang-migrate refuses a version
// it does not know ("no migration found for version 2"), unless it builds
// its flags with Migrate(false).
//
// # Notifications
//
// Releases wake the flags of the same [Store] at once. On Linux, flags in
// other processes sharing the file are woken too, by one watcher per
// Store: a file-change signal (inotify) on the database file and its
// -wal file, confirmed by PRAGMA data_version and one read of the free
// rows on a connection of the Store's pool. The watcher costs no
// statement while nothing is written; per commit of another connection
// (a renewal, an attempt that wrote), up to ten reads of data_version
// (no table read, no disk I/O) and one SELECT of the free rows, per
// Store, whatever its number of flags. It is a hint the flags do not rely on: a lost
// signal leaves them to their poll (at most 2 s at the default poll
// interval), so the Store does not report that its notifications reach
// other processes. No watcher runs for an in-memory database or a pool
// limited to one connection.
package sqlite

import (
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/notify"
	"github.com/dbflag/leadership/internal/schema"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// Store is the SQLite store. It is safe for concurrent use; create it with
// [New].
type Store struct {
	db       *sql.DB
	hub      notify.Hub
	tb       *timebase
	migrated schema.Once
	acquires *sqlstore.Acquires // batch.go
	releases *sqlstore.Releases // batch.go
	watching atomic.Bool        // the watcher watches the file: HintsOtherProcesses
}

var (
	_ leadership.Store           = (*Store)(nil)
	_ leadership.ReleaseNotifier = (*Store)(nil)
	_ leadership.SchemaVersioner = (*Store)(nil)
)

// New returns a store on db, a database opened with modernc.org/sqlite
// (see [Open]). It never closes db. The schema is applied by
// [Store.Migrate], which [leadership.FlagBuilder.Build] calls by default.
func New(db *sql.DB) (*Store, error) { return newStore(db, nil) }

// newStore is New with the timebase tb, the host's clock when nil.
func newStore(db *sql.DB, tb *timebase) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlite.New: db is nil", leadership.ErrInvalidArgument)
	}
	if tb == nil {
		var err error
		if tb, err = system(); err != nil {
			return nil, err
		}
	}
	s := &Store{db: db, tb: tb}
	s.newBatchers()
	s.hub.Watch = s.watch // notify.go
	return s, nil
}

// Open opens the SQLite database file at path with the settings that
// sharing flags between processes needs (see the package documentation).
// The special path ":memory:" opens a private in-memory database limited
// to one connection, for tests and demonstrations in one process.
//
// On Unix, Open creates a missing file readable and writable by its owner
// only (mode 0600, whatever the umask), and SQLite gives its -wal and -shm
// files the same mode: any user who can open them can hold SQLite's locks
// and so stop the leader's renewals. To share the file between users,
// create it beforehand with the mode and group they need (Open keeps the
// mode of an existing file), in a directory they may all write. In a
// directory every user may write (such as /tmp), Open refuses a path, or
// a -wal or -shm file, that is a symbolic link or belongs to another
// user. A file this user may not read and write fails Open with an error
// that says so.
func Open(path string) (*sql.DB, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: sqlite.Open: path is empty", leadership.ErrInvalidArgument)
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("%w: sqlite.Open: path %q contains '?' or '#'; open it yourself with a file: URI", leadership.ErrInvalidArgument, path)
	}
	const pragmas = "?_pragma=busy_timeout(10000)&_txlock=immediate"
	if path == ":memory:" {
		db, err := sql.Open("sqlite", "file::memory:"+pragmas)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(1)
		return db, nil
	}
	if err := prepareFile(path); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", "file:"+path+pragmas)
	if err != nil {
		return nil, err
	}
	if err := enableWAL(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return db, nil
}

// enableWAL switches the file to WAL mode, which persists in the file.
// The switch needs an exclusive lock and does not wait for a busy
// database, so it is retried while other processes open the same file.
func enableWAL(db *sql.DB) error {
	var err error
	for range 200 {
		var mode string
		if err = db.QueryRow(`PRAGMA journal_mode=WAL`).Scan(&mode); err == nil {
			if mode != "wal" {
				return fmt.Errorf("journal mode is %q after asking for WAL", mode)
			}
			return nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	return fmt.Errorf("enable WAL: %w", err)
}
