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
// SQLite). Every write is a single statement that commits on its own
// before its result is returned; a connection that is already inside a
// transaction (a BEGIN in a connection hook or DSN pragma) is refused with
// an error that says so, instead of a write that would roll back after
// the caller trusted it.
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
// Releases wake the flags of the same [Store] at once; flags in other
// processes notice a release at their next poll.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/notify"
	"github.com/dbflag/leadership/internal/schema"
)

// Store is the SQLite store. It is safe for concurrent use; create it with
// [New].
type Store struct {
	db       *sql.DB
	hub      notify.Hub
	tb       *timebase
	migrated schema.Once
}

var (
	_ leadership.Store           = (*Store)(nil)
	_ leadership.ReleaseNotifier = (*Store)(nil)
)

// Option configures a Store. There are none yet; the parameter keeps New's
// signature stable.
type Option func(*Store)

// New returns a store on db, a database opened with modernc.org/sqlite
// (see [Open]). It never closes db. The schema is applied by
// [Store.Migrate], which [leadership.FlagBuilder.Build] calls by default.
func New(db *sql.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlite.New: db is nil", leadership.ErrInvalidArgument)
	}
	s := &Store{db: db}
	for _, o := range opts {
		o(s)
	}
	if s.tb == nil {
		tb, err := system()
		if err != nil {
			return nil, err
		}
		s.tb = tb
	}
	return s, nil
}

// Open opens the SQLite database file at path with the settings that
// sharing flags between processes needs (see the package documentation).
// The special path ":memory:" opens a private in-memory database limited
// to one connection, for tests and demonstrations in one process.
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

// Acquire implements [leadership.Store.Acquire].
func (s *Store) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	if err := req.Validate(); err != nil {
		return leadership.Result{}, err
	}
	leaseMillis := (req.Lease + time.Millisecond - 1).Milliseconds() // round up: never shorter than asked
	var version, wall, renewed, expires int64
	conn, err := s.conn(ctx, "acquire", req.Name)
	if err != nil {
		return leadership.Result{}, err
	}
	defer conn.Close()
	// A row is free when its term has expired by the host clock of this
	// boot, when an earlier boot wrote it, or, when an older version of
	// this package wrote it (host_boot ''), when it has expired by the wall
	// clock, as that version judges it.
	err = conn.QueryRowContext(ctx, clockCTE(5)+`
INSERT INTO leadership_flags (`+columns+`)
SELECT ?1, ?2, 1, c.wall, c.wall + ?4, ?6, c.host, c.host + ?4, 1 FROM c WHERE true
ON CONFLICT (name) DO UPDATE SET
    version = CASE WHEN leadership_flags.holder = excluded.holder AND leadership_flags.version = ?3
                   THEN leadership_flags.version ELSE leadership_flags.version + 1 END,
    holder = excluded.holder,
    renewed_at = excluded.renewed_at,
    expires_at = excluded.expires_at,
    host_boot = excluded.host_boot,
    host_renewed_at = excluded.host_renewed_at,
    host_expires_at = excluded.host_expires_at,
    host_writes = leadership_flags.host_writes + 1
WHERE (?3 > 0 AND leadership_flags.holder = excluded.holder AND leadership_flags.version = ?3)
   OR CASE leadership_flags.host_boot
          WHEN excluded.host_boot THEN leadership_flags.host_expires_at <= excluded.host_renewed_at
          WHEN '' THEN leadership_flags.expires_at <= excluded.renewed_at
          ELSE 1
      END
RETURNING version, renewed_at, host_renewed_at, host_expires_at`,
		req.Name, req.Holder, req.Version, leaseMillis, s.tb.key, s.tb.boot).Scan(&version, &wall, &renewed, &expires)
	switch {
	case err == nil:
		s.tb.observe(instant{host: renewed, wall: wall})
		return leadership.Result{
			Record: leadership.Record{
				Name: req.Name, Holder: req.Holder, Version: version,
				RenewedAt: s.tb.at(renewed), ExpiresAt: s.tb.at(expires),
			},
			Acquired: true,
			Now:      s.tb.at(renewed),
		}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return leadership.Result{}, fmt.Errorf("sqlite: acquire %q: %w", req.Name, err)
	}
	var r row
	var now instant
	err = conn.QueryRowContext(ctx, clockCTE(2)+`
SELECT holder, version, renewed_at, expires_at, host_boot, host_renewed_at, host_expires_at, c.host, c.wall
FROM leadership_flags, c WHERE name = ?1`, req.Name, s.tb.key).Scan(
		&r.holder, &r.version, &r.renewed, &r.expiry, &r.boot, &r.hostRenewed, &r.hostExpiry, &now.host, &now.wall)
	if err != nil {
		return leadership.Result{}, fmt.Errorf("sqlite: read %q after losing: %w", req.Name, err)
	}
	s.tb.observe(now)
	return leadership.Result{Record: s.tb.record(req.Name, r, now), Now: s.tb.at(now.host)}, nil
}

// Release implements [leadership.Store.Release].
func (s *Store) Release(ctx context.Context, name, holder string, version int64) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	return s.update(ctx, "release", name, clockCTE(4)+`UPDATE leadership_flags
SET holder = '', expires_at = MIN(expires_at, c.wall), host_expires_at = MIN(host_expires_at, c.host),
    host_writes = host_writes + 1
FROM c WHERE name = ?1 AND holder = ?2 AND holder <> '' AND version = ?3`, name, holder, version, s.tb.key)
}

// Evict implements [leadership.Store.Evict].
func (s *Store) Evict(ctx context.Context, name string) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	return s.update(ctx, "evict", name, `UPDATE leadership_flags SET holder = '', host_writes = host_writes + 1
WHERE name = ? AND holder <> ''`, name)
}

// conn returns a connection of the store's pool for one write of the flag
// name, checked to be outside a transaction, so that the write's single
// statement commits on its own before its result is trusted. On a
// connection already inside a transaction (one a connection hook or a DSN
// pragma opened, or a stray db.Exec("BEGIN") on a one-connection pool) the
// statement would join that transaction and stay uncommitted, to be rolled
// back after the caller trusted it. The check is a deferred BEGIN, which
// SQLite refuses inside a transaction, and its COMMIT: neither takes a lock
// nor writes, so the write lock is held only by the write itself.
func (s *Store) conn(ctx context.Context, what, name string) (*sql.Conn, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s %q: %w", what, name, err)
	}
	if _, err = conn.ExecContext(ctx, "BEGIN DEFERRED"); err == nil {
		_, err = conn.ExecContext(ctx, "COMMIT")
	}
	if err != nil {
		conn.Close()
		if strings.Contains(err.Error(), "within a transaction") {
			return nil, fmt.Errorf("sqlite: %s %q: the connection is already inside a transaction, so the write would not commit; "+
				"give the store a *sql.DB whose connections start outside a transaction (no BEGIN in a connection hook or DSN): %w", what, name, err)
		}
		return nil, fmt.Errorf("sqlite: %s %q: check the connection is outside a transaction: %w", what, name, err)
	}
	return conn, nil
}

// update runs the UPDATE query of a release or an eviction of name,
// reports whether it changed a row and, if so, wakes the flags of this
// store waiting on name.
func (s *Store) update(ctx context.Context, what, name, query string, args ...any) (bool, error) {
	conn, err := s.conn(ctx, what, name)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	r, err := conn.ExecContext(ctx, query, args...)
	if err != nil {
		return false, fmt.Errorf("sqlite: %s %q: %w", what, name, err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: %s %q: rows affected: %w", what, name, err)
	}
	if n > 0 {
		s.hub.Notify(name)
	}
	return n > 0, nil
}

// Flags implements [leadership.Store.Flags].
func (s *Store) Flags(ctx context.Context) ([]leadership.Record, time.Time, error) {
	var now instant
	if err := s.db.QueryRowContext(ctx, clockCTE(1)+`SELECT host, wall FROM c`, s.tb.key).Scan(&now.host, &now.wall); err != nil {
		return nil, time.Time{}, fmt.Errorf("sqlite: read clock: %w", err)
	}
	s.tb.observe(now)
	rows, err := s.db.QueryContext(ctx, `SELECT name, holder, version, renewed_at, expires_at, host_boot, host_renewed_at, host_expires_at
FROM leadership_flags ORDER BY name`)
	if err != nil {
		return nil, time.Time{}, describe("list flags", err)
	}
	defer rows.Close()
	var out []leadership.Record
	for rows.Next() {
		var name string
		var r row
		if err := rows.Scan(&name, &r.holder, &r.version, &r.renewed, &r.expiry, &r.boot, &r.hostRenewed, &r.hostExpiry); err != nil {
			return nil, time.Time{}, fmt.Errorf("sqlite: list flags: %w", err)
		}
		out = append(out, s.tb.record(name, r, now))
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("sqlite: list flags: %w", err)
	}
	return out, s.tb.at(now.host), nil
}

// NotifyReleases implements [leadership.ReleaseNotifier] for flags on this
// store (this process only).
func (s *Store) NotifyReleases(name string) (<-chan struct{}, func()) {
	return s.hub.Subscribe(name)
}

// describe wraps err with what failed and, for a missing table, how to fix
// it.
func describe(what string, err error) error {
	if strings.Contains(err.Error(), "no such table") {
		return fmt.Errorf("sqlite: %s: table missing: run the migrations (Build does unless Migrate(false); or leadership migrate): %w", what, err)
	}
	return fmt.Errorf("sqlite: %s: %w", what, err)
}
