package sqlite_test

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/golang-migrate/migrate/v4"
	msqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/migrations"
	"github.com/dbflag/leadership/sqlite"
)

// migrateV1 applies the schema of the versions before migration 2 the way
// they applied it: golang-migrate with the sqlite migrations up to 0001.
func migrateV1(t *testing.T, path string) error {
	t.Helper()
	old := fstest.MapFS{}
	for _, name := range []string{"0001_create_flags.up.sql", "0001_create_flags.down.sql"} {
		b, err := fs.ReadFile(migrations.FS, "sqlite/"+name)
		if err != nil {
			t.Fatal(err)
		}
		old["sqlite/"+name] = &fstest.MapFile{Data: b}
	}
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src, err := iofs.New(old, "sqlite")
	if err != nil {
		t.Fatal(err)
	}
	drv, err := msqlite.WithInstance(db, &msqlite.Config{MigrationsTable: migrations.MigrationsTable})
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "sqlite", drv)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return err
	}
	return nil
}

// TestMigrateFromVersion1 upgrades a file an older version made and holds
// a live term in: the term survives the migration, judged by its wall
// clock expiry, and several processes migrating at once all succeed.
func TestMigrateFromVersion1(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flags.db")
	if err := migrateV1(t, path); err != nil {
		t.Fatal(err)
	}
	old, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	const lease = time.Minute
	if v := v1(t, old, "old", 0, lease); v != 1 {
		t.Fatalf("older version's acquire = %d, want 1", v)
	}

	c := sqlite.NewFakeClock("boot-1")
	var (
		wg     sync.WaitGroup
		stores = make([]*sqlite.Store, 4)
		errs   = make([]error, 4)
	)
	for i := range stores {
		db, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if stores[i], err = sqlite.NewWithClock(db, c); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[i] = stores[i].Migrate(context.Background()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Migrate of a version-1 file: %v", err)
	}
	if v, dirty, err := stores[0].SchemaVersion(context.Background()); v != 2 || dirty || err != nil {
		t.Fatalf("SchemaVersion = %d, %v, %v; want 2, false, nil", v, dirty, err)
	}
	if r := acquire(t, stores[0], "b", 0, lease); r.Acquired || r.Holder != "old" {
		t.Fatalf("acquire of the older version's live term after migrating = %+v, want held by old", r)
	}
	if v := v1(t, old, "old", 1, lease); v != 1 {
		t.Fatalf("the older version's renewal after the migration = %d, want 1", v)
	}
	c.Advance(lease + time.Second)
	if r := acquire(t, stores[1], "b", 0, lease); !r.Acquired || r.Version != 2 {
		t.Fatalf("acquire after the older term expired = %+v, want acquired with version 2", r)
	}
	// An older version starting now refuses the newer schema at Build (it
	// builds with Migrate(false)), as golang-migrate does.
	if err := migrateV1(t, path); err == nil || !strings.Contains(err.Error(), "no migration found for version 2") {
		t.Fatalf("an older version's Migrate on a version-2 file = %v, want golang-migrate's \"no migration found for version 2\"", err)
	}
}

// TestDirtySchemaFailsBuild marks the version dirty, as a golang-migrate
// run that failed half-way leaves it: Build fails within seconds and says
// how to fix it, and once fixed Build succeeds.
func TestDirtySchemaFailsBuild(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flags.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := newStore(t, db)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE ` + migrations.MigrationsTable + ` SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	// A process that starts now: a store that has migrated once does not
	// migrate (nor check) again.
	testdb.CheckDirtyBuild(t, newStore(t, db), "sqlite", 2)
	if _, err := db.Exec(`UPDATE ` + migrations.MigrationsTable + ` SET dirty = false`); err != nil {
		t.Fatal(err)
	}
	f, err := leadership.NewFlag().Store(newStore(t, db)).Name("f").Build(context.Background())
	if err != nil {
		t.Fatalf("Build after the fix: %v", err)
	}
	f.Close()
}
