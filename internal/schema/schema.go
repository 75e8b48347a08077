// Package schema applies the embedded migrations with golang-migrate and
// checks the shape of the flag table, for every store.
package schema

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/dbflag/leadership/migrations"
)

// Apply applies the migrations of dialect (a directory of
// [migrations.FS]) through drv, the driver golang-migrate names driverName.
// It closes drv afterwards, so drv must be one whose Close leaves the
// caller's pool or database open (one made on a connection or a
// throwaway *sql.DB).
func Apply(dialect, driverName string, drv database.Driver) (err error) {
	return ApplyFS(migrations.FS, dialect, driverName, drv)
}

// ApplyFS is [Apply] with the migrations read from fsys instead of
// [migrations.FS] (a store may rewrite some of them).
func ApplyFS(fsys fs.FS, dialect, driverName string, drv database.Driver) (err error) {
	src, err := iofs.New(fsys, dialect)
	if err != nil {
		drv.Close()
		return fmt.Errorf("read migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, driverName, drv)
	if err != nil {
		src.Close()
		drv.Close()
		return err
	}
	// golang-migrate reads migrations ahead into a channel of this size
	// and, when one fails, stops reading it: with more migrations pending
	// than it holds, its reading goroutine blocks for good (a leak at each
	// failed Migrate). Room for every migration of a dialect.
	m.PrefetchMigrations = 256
	defer func() {
		srcErr, dbErr := m.Close()
		if err == nil {
			err = errors.Join(srcErr, dbErr)
		}
	}()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		var dirty migrate.ErrDirty
		if errors.As(err, &dirty) {
			return Dirty(dialect, uint(dirty.Version))
		}
		return err
	}
	return nil
}

// Dirty is the error for a version table that marks version as dirty: a
// migration failed or stopped half-way, and nothing applies migrations
// until someone has looked. It wraps [migrate.ErrDirty] and names the fix.
func Dirty(dialect string, version uint) error {
	return fmt.Errorf("schema version %d is marked dirty: its migration failed or stopped half-way "+
		"(or golang-migrate is applying it in another process right now: then retry). "+
		"Make table %s match migrations/%s/%04d_*.up.sql of this module by hand, "+
		"then mark the version clean with UPDATE %s SET dirty = false "+
		"(or golang-migrate's `migrate ... force %d`), and run `leadership migrate`: %w",
		version, migrations.Table, dialect, version, migrations.MigrationsTable, version, migrate.ErrDirty{Version: int(version)})
}

// Check compares the columns got (name → type, as information_schema
// reports them, in lower case) with want, and returns an error naming each
// missing or mistyped column and the fix; prefix names the store.
func Check(prefix string, got map[string]string, want [][2]string) error {
	var wrong []string
	for _, c := range want {
		if have := got[c[0]]; have != c[1] {
			if have == "" {
				have = "missing"
			}
			wrong = append(wrong, fmt.Sprintf("%s %s (is %s)", c[0], c[1], have))
		}
	}
	if len(wrong) == 0 {
		return nil
	}
	return fmt.Errorf("%s: table %s has the wrong shape, want columns %s: drop it (and the table %s) and let Migrate create it",
		prefix, migrations.Table, strings.Join(wrong, ", "), migrations.MigrationsTable)
}
