package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/dbflag/leadership/internal/schema"
	"github.com/dbflag/leadership/internal/sqlstore"
	"github.com/dbflag/leadership/migrations"
)

// dirtyWait is how long Migrate waits for a version marked dirty to turn
// clean before it fails: golang-migrate (its command-line tool, or an older
// version of this package) marks a version dirty while it applies it, for
// milliseconds on SQLite.
const dirtyWait = 3 * time.Second

// Migrate applies the embedded migrations (package migrations, in
// golang-migrate's format and version table [migrations.MigrationsTable])
// and checks the flag table's shape. All pending migrations and the new
// version are written in one IMMEDIATE transaction, so processes that
// migrate one file at once are serialized by SQLite's write lock and never
// see a migration half-applied; the wait for that lock ends at ctx's
// deadline, or after the connection's busy timeout. A version marked dirty (a golang-migrate
// run that failed or stopped half-way) fails Migrate within a few seconds,
// with an error that says how to fix it. It does not close the database.
// Once a call has succeeded, later calls on the same Store return nil
// without touching the database.
func (s *Store) Migrate(ctx context.Context) error { return s.migrated.Do(ctx, s.applyMigrations) }

func (s *Store) applyMigrations(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: connect: %w", err)
	}
	deadline := time.Now().Add(dirtyWait)
	for {
		err := s.migrateOnce(ctx, migrations.FS)
		if dirty := (dirtyError{}); !errors.As(err, &dirty) || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("sqlite: apply migrations: %w", err)
			}
			return s.checkShape(ctx)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sqlite: apply migrations: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

type dirtyError struct{ err error }

func (e dirtyError) Error() string { return e.err.Error() }
func (e dirtyError) Unwrap() error { return e.err }

// migrateOnce applies the sqlite migrations of fsys in one transaction.
func (s *Store) migrateOnce(ctx context.Context, fsys fs.FS) (err error) {
	src, err := iofs.New(fsys, "sqlite")
	if err != nil {
		return fmt.Errorf("read migrations: %w", err)
	}
	defer src.Close()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// BEGIN IMMEDIATE takes the write lock at once (waiting out the busy
	// timeout, bounded by ctx's deadline: see busy.go), so two processes
	// never both read the same old version.
	restore, err := boundBusyWait(ctx, conn)
	if err != nil {
		return err
	}
	if restore != nil {
		defer restore()
	}
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return err
	}
	defer func() {
		if err == nil {
			return
		}
		if _, rbErr := conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`); rbErr != nil {
			// Still inside the transaction: keep the connection out of the pool.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	// The version table as golang-migrate's sqlite driver makes it, so that
	// its command-line tool can read and force it.
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+migrations.MigrationsTable+` (version uint64,dirty bool);
CREATE UNIQUE INDEX IF NOT EXISTS version_unique ON `+migrations.MigrationsTable+` (version);`); err != nil {
		return err
	}
	var (
		current uint
		dirty   bool
		have    = true
	)
	err = conn.QueryRowContext(ctx, `SELECT version, dirty FROM `+migrations.MigrationsTable+` LIMIT 1`).Scan(&current, &dirty)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		have, err = false, nil
	case err != nil:
		return err
	case dirty:
		return dirtyError{schema.Dirty("sqlite", current)}
	}
	var pending []uint
	known := false
	v, err := src.First()
	for ; err == nil; v, err = src.Next(v) {
		known = known || v == current
		if !have || v > current {
			pending = append(pending, v)
		}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read migrations: %w", err)
	}
	if have && !known {
		return fmt.Errorf("schema version %d is not one this version of the package knows (a newer version migrated the file): run the newer version", current)
	}
	for _, v := range pending {
		if err := apply(ctx, conn, src, v); err != nil {
			return err
		}
	}
	if len(pending) > 0 {
		if _, err := conn.ExecContext(ctx, `DELETE FROM `+migrations.MigrationsTable+`;
INSERT INTO `+migrations.MigrationsTable+` (version, dirty) VALUES (?, false)`, pending[len(pending)-1]); err != nil {
			return fmt.Errorf("record schema version: %w", err)
		}
	}
	_, err = conn.ExecContext(ctx, `COMMIT`)
	return err
}

// apply runs the up migration v of src on conn.
func apply(ctx context.Context, conn *sql.Conn, src source.Driver, v uint) error {
	r, name, err := src.ReadUp(v)
	if err != nil {
		return fmt.Errorf("read migration %d: %w", v, err)
	}
	body, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		return fmt.Errorf("read migration %d: %w", v, err)
	}
	if _, err := conn.ExecContext(ctx, string(body)); err != nil {
		return fmt.Errorf("migration %d (%s): %w", v, name, err)
	}
	return nil
}

// SchemaVersion reports the version of the applied migrations and whether
// a migration failed half-way (dirty), read from golang-migrate's table
// [migrations.MigrationsTable]; version 0 means none was applied.
func (s *Store) SchemaVersion(ctx context.Context) (version uint, dirty bool, err error) {
	version, dirty, err = sqlstore.Version(func(dest ...any) error {
		return s.db.QueryRowContext(ctx, `SELECT version, dirty FROM `+migrations.MigrationsTable+` LIMIT 1`).Scan(dest...)
	}, func(err error) bool {
		return errors.Is(err, sql.ErrNoRows) || noTable(err)
	})
	if err != nil {
		return 0, false, fmt.Errorf("sqlite: read schema version: %w", err)
	}
	return version, dirty, nil
}

// columns are the columns of the flag table the store reads and writes.
const columns = `name, holder, version, renewed_at, expires_at, host_boot, host_renewed_at, host_expires_at, host_writes`

// checkShape fails with a clear message when the flag table exists with
// other columns than the store needs (for example, made by hand).
func (s *Store) checkShape(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT `+columns+` FROM `+migrations.Table+` LIMIT 0`)
	if err != nil {
		return fmt.Errorf("sqlite: table %s does not have the columns %s (drop it and the table %s, and let Migrate create them): %w",
			migrations.Table, columns, migrations.MigrationsTable, err)
	}
	return rows.Close()
}
