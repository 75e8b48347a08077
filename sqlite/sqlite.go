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
// # Clock and round trips
//
// Instants are the database's unixepoch('subsec') in milliseconds, which is
// constant within one statement. Acquire-or-renew is one conditional
// INSERT … ON CONFLICT DO UPDATE … WHERE … RETURNING statement; when it
// loses, a second SELECT on the same in-process database reports the holder
// (no network round trip exists for SQLite).
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

	"github.com/golang-migrate/migrate/v4"
	msqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/notify"
	"github.com/dbflag/leadership/internal/schema"
	"github.com/dbflag/leadership/migrations"
)

// Store is the SQLite store. It is safe for concurrent use; create it with
// [New].
type Store struct {
	db       *sql.DB
	hub      notify.Hub
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

// nowMillis is the database clock in Unix milliseconds.
const nowMillis = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`

// Migrate applies the embedded migrations with golang-migrate into the
// table [migrations.MigrationsTable] and checks the flag table's shape. It
// does not close the database. Once a call has succeeded, later calls on
// the same Store return nil without touching the database.
func (s *Store) Migrate(ctx context.Context) error { return s.migrated.Do(ctx, s.applyMigrations) }

func (s *Store) applyMigrations(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: connect: %w", err)
	}
	// golang-migrate's SQLite lock covers one process only: a process that
	// finds the version dirty while another applies the same migration
	// waits for it to finish.
	var err error
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		err = s.migrateOnce()
		var dirty migrate.ErrDirty
		if !errors.As(err, &dirty) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sqlite: apply migrations: %w (another process may be applying them, or a migration failed: see table %s)", err, migrations.MigrationsTable)
		case <-time.After(wait):
		}
	}
	if err != nil {
		return err
	}
	return s.checkShape(ctx)
}

func (s *Store) migrateOnce() error {
	src, err := iofs.New(migrations.FS, "sqlite")
	if err != nil {
		return fmt.Errorf("sqlite: read migrations: %w", err)
	}
	defer src.Close()
	drv, err := msqlite.WithInstance(s.db, &msqlite.Config{MigrationsTable: migrations.MigrationsTable})
	if err != nil {
		return fmt.Errorf("sqlite: prepare migrations: %w", err)
	}
	// Not m.Close(): it would close the caller's *sql.DB through the driver.
	m, err := migrate.NewWithInstance("iofs", src, "sqlite", drv)
	if err != nil {
		return fmt.Errorf("sqlite: prepare migrations: %w", err)
	}
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("sqlite: apply migrations: %w", err)
	}
	return nil
}

// SchemaVersion reports the version of the applied migrations and whether
// a migration failed half-way (dirty), read from golang-migrate's table
// [migrations.MigrationsTable]; version 0 means none was applied.
func (s *Store) SchemaVersion(ctx context.Context) (version uint, dirty bool, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT version, dirty FROM `+migrations.MigrationsTable+` LIMIT 1`).Scan(&version, &dirty)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil && strings.Contains(err.Error(), "no such table"):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("sqlite: read schema version: %w", err)
	}
	return version, dirty, nil
}

// checkShape fails with a clear message when the flag table exists with
// other columns than the store needs (for example, made by hand).
func (s *Store) checkShape(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT name, holder, version, renewed_at, expires_at FROM `+migrations.Table+` LIMIT 0`)
	if err != nil {
		return fmt.Errorf("sqlite: table %s does not have the columns name, holder, version, renewed_at, expires_at (drop it and let Migrate create it): %w", migrations.Table, err)
	}
	return rows.Close()
}

// Acquire implements [leadership.Store.Acquire].
func (s *Store) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	if err := req.Validate(); err != nil {
		return leadership.Result{}, err
	}
	leaseMillis := (req.Lease + time.Millisecond - 1).Milliseconds() // round up: never shorter than asked
	var version, renewed, expires int64
	err := s.db.QueryRowContext(ctx, `
INSERT INTO leadership_flags (name, holder, version, renewed_at, expires_at)
VALUES (?1, ?2, 1, `+nowMillis+`, `+nowMillis+` + ?4)
ON CONFLICT (name) DO UPDATE SET
    version = CASE WHEN leadership_flags.holder = excluded.holder AND leadership_flags.version = ?3
                   THEN leadership_flags.version ELSE leadership_flags.version + 1 END,
    holder = excluded.holder,
    renewed_at = excluded.renewed_at,
    expires_at = excluded.expires_at
WHERE (?3 > 0 AND leadership_flags.holder = excluded.holder AND leadership_flags.version = ?3)
   OR leadership_flags.expires_at <= excluded.renewed_at
RETURNING version, renewed_at, expires_at`,
		req.Name, req.Holder, req.Version, leaseMillis).Scan(&version, &renewed, &expires)
	switch {
	case err == nil:
		return leadership.Result{
			Record: leadership.Record{
				Name: req.Name, Holder: req.Holder, Version: version,
				RenewedAt: time.UnixMilli(renewed), ExpiresAt: time.UnixMilli(expires),
			},
			Acquired: true,
			Now:      time.UnixMilli(renewed),
		}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return leadership.Result{}, fmt.Errorf("sqlite: acquire %q: %w", req.Name, err)
	}
	res := leadership.Result{Record: leadership.Record{Name: req.Name}}
	var now int64
	err = s.db.QueryRowContext(ctx, `SELECT holder, version, renewed_at, expires_at, `+nowMillis+`
FROM leadership_flags WHERE name = ?`, req.Name).Scan(&res.Holder, &res.Version, &renewed, &expires, &now)
	if err != nil {
		return leadership.Result{}, fmt.Errorf("sqlite: read %q after losing: %w", req.Name, err)
	}
	res.RenewedAt, res.ExpiresAt, res.Now = time.UnixMilli(renewed), time.UnixMilli(expires), time.UnixMilli(now)
	return res, nil
}

// Release implements [leadership.Store.Release].
func (s *Store) Release(ctx context.Context, name, holder string, version int64) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	r, err := s.db.ExecContext(ctx, `UPDATE leadership_flags
SET holder = '', expires_at = MIN(expires_at, `+nowMillis+`)
WHERE name = ? AND holder = ? AND holder <> '' AND version = ?`, name, holder, version)
	if err != nil {
		return false, fmt.Errorf("sqlite: release %q: %w", name, err)
	}
	return s.affected(r, name)
}

// Evict implements [leadership.Store.Evict].
func (s *Store) Evict(ctx context.Context, name string) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	r, err := s.db.ExecContext(ctx, `UPDATE leadership_flags SET holder = '' WHERE name = ? AND holder <> ''`, name)
	if err != nil {
		return false, fmt.Errorf("sqlite: evict %q: %w", name, err)
	}
	return s.affected(r, name)
}

// affected reports whether r changed a row and, if so, wakes the flags of
// this store waiting on name.
func (s *Store) affected(r sql.Result, name string) (bool, error) {
	n, err := r.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: rows affected: %w", err)
	}
	if n > 0 {
		s.hub.Notify(name)
	}
	return n > 0, nil
}

// Flags implements [leadership.Store.Flags].
func (s *Store) Flags(ctx context.Context) ([]leadership.Record, time.Time, error) {
	var now int64
	if err := s.db.QueryRowContext(ctx, `SELECT `+nowMillis).Scan(&now); err != nil {
		return nil, time.Time{}, fmt.Errorf("sqlite: read clock: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT name, holder, version, renewed_at, expires_at FROM leadership_flags ORDER BY name`)
	if err != nil {
		return nil, time.Time{}, describe("list flags", err)
	}
	defer rows.Close()
	var out []leadership.Record
	for rows.Next() {
		var r leadership.Record
		var renewed, expires int64
		if err := rows.Scan(&r.Name, &r.Holder, &r.Version, &renewed, &expires); err != nil {
			return nil, time.Time{}, fmt.Errorf("sqlite: list flags: %w", err)
		}
		r.RenewedAt, r.ExpiresAt = time.UnixMilli(renewed), time.UnixMilli(expires)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("sqlite: list flags: %w", err)
	}
	return out, time.UnixMilli(now), nil
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
