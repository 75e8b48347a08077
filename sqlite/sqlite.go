// Package sqlite is the [leadership.Store] for SQLite, the embedded default,
// on the pure-Go driver modernc.org/sqlite (registered as "sqlite"). Several
// processes on one machine share flags through one database file.
//
//	db, err := sqlite.Open("flags.db")
//	store, err := sqlite.New(db)
//	flag, err := leadership.NewFlag().Store(store).Name("nightly-report").Build(ctx)
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
// after running PRAGMA journal_mode=WAL once on the file. [Open] creates a
// missing file readable and writable by its owner only (anyone who can open
// the file or its -shm file can take SQLite's locks and stall the leader),
// keeps the mode of an existing one, and in a directory every user may
// write refuses a path, -wal or -shm file that is a symbolic link or
// another user's. Every process sharing the file needs read and write
// access to it, its -wal and -shm files and their directory.
//
// # Clock
//
// Every process sharing a database file runs on one host, so the store
// judges expiry by a clock of the host, read inside each statement. On
// Linux it is CLOCK_BOOTTIME, which wall-clock steps (NTP, date -s) do not
// move; rows carry the boot ID, so a row from an earlier boot is free at
// once, and processes in time namespaces read the same clock (the store
// takes their offset off; [New] fails where it cannot read it). On other
// systems it is the wall clock: a forward step larger than the flag's
// SafetyMargin lets a follower acquire while the holder still trusts its
// term. The instants the store reports are this clock shifted to read as
// the wall clock.
//
// # Statements
//
// Acquire-or-renew is one conditional INSERT … ON CONFLICT DO UPDATE …
// WHERE … RETURNING statement. Every write commits before its result is
// returned; the attempts of flags of one Store that are due together share
// one transaction (BEGIN IMMEDIATE … COMMIT), and so do the releases
// of flags closed together. A connection already inside
// a transaction is refused. A process stopped inside one of its writes
// keeps the others waiting for SQLite's write lock until it resumes or
// dies: failover is delayed, never made unsafe.
//
// # Notifications
//
// Releases wake the flags of the same [Store] at once. On Linux, flags in
// other processes sharing the file are woken too, by one watcher per Store
// (inotify on the database and its -wal file, confirmed by PRAGMA
// data_version and a read of the free rows). It is a hint: a lost signal
// leaves the flags to their poll (at most 2 s at the default poll
// interval), so the Store does not report notifications that reach every
// process. No watcher runs for an in-memory database or a pool limited to
// one connection.
//
// The clock in detail, the cost of the watcher and the rolling upgrade
// from schema version 1 are in the repository's docs/stores.md and
// docs/operations.md.
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
	acquires *sqlstore.Acquires      // batch.go
	releases *sqlstore.Releases      // batch.go
	ticks    leadership.RenewalTicks // batch.go
	watching atomic.Bool             // the watcher watches the file: HintsOtherProcesses
	file     atomic.Pointer[string]  // the main file's path, once read (notify.go)
}

var (
	_ leadership.Store           = (*Store)(nil)
	_ leadership.ReleaseNotifier = (*Store)(nil)
	_ leadership.AcquireBatcher  = (*Store)(nil)
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
// user; SQLite creates those two files later, refusing links but not a
// regular file another user planted meanwhile (see the repository's
// docs/operations.md). A file this user may not read and write fails Open
// with an error that says so.
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
