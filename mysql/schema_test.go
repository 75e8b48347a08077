package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	mmysql "github.com/golang-migrate/migrate/v4/database/mysql"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/migrations"
	"github.com/dbflag/leadership/mysql"
)

// migrateTo applies the migrations of dsn's database up to version, as an
// earlier release of the store (or an administrator) did.
func migrateTo(t *testing.T, dsn string, version uint) {
	t.Helper()
	db := openDB(t, dsn)
	drv, err := mmysql.WithInstance(db, &mmysql.Config{MigrationsTable: migrations.MigrationsTable})
	if err != nil {
		t.Fatal(err)
	}
	src, err := iofs.New(migrations.FS, "mysql")
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "mysql", drv)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Migrate(version); err != nil {
		t.Fatalf("migrate to version %d: %v", version, err)
	}
}

// TestRoutineModeRefusesASchemaOlderThanItsProcedures: on a database
// migrated up to version 12 (the procedures of 0009 and 0012, whose
// replies have the shape of today's but which neither re-read the
// failover guard before they commit nor let a row at the largest version
// fail alone), a flag built with Migrate(false) in routine mode fails
// with an error naming the versions and the command that applies the
// migrations, and so does one on a schema marked dirty; statement mode,
// which runs no procedure, works on version 12; once migrated, routine
// mode works.
func TestRoutineModeRefusesASchemaOlderThanItsProcedures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	migrateTo(t, dsn, 12)
	build := func(s *mysql.Store) error {
		f, err := leadership.NewFlag().Store(s).Name("f").Migrate(false).Build(ctx)
		if err == nil {
			f.Close()
		}
		return err
	}
	err := build(newStore(t, openDB(t, dsn)))
	if err == nil {
		t.Fatal("a flag was built in routine mode on schema version 12")
	}
	t.Logf("Build on schema version 12: %v", err)
	for _, want := range []string{"version 12", "version 16", "leadership migrate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Build on schema version 12 = %q, want it to name %q", err, want)
		}
	}
	if err := build(newStore(t, openDB(t, dsn), mysql.WithoutRoutines())); err != nil {
		t.Fatalf("statement mode on schema version 12: %v", err)
	}
	db := openDB(t, dsn)
	if err := newStore(t, db).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := build(newStore(t, openDB(t, dsn))); err != nil {
		t.Fatalf("routine mode once migrated: %v", err)
	}
	if _, err := db.Exec(`UPDATE leadership_schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	var dirty migrate.ErrDirty
	if err := build(newStore(t, openDB(t, dsn))); !errors.As(err, &dirty) || !strings.Contains(err.Error(), "leadership migrate") {
		t.Fatalf("Build with Migrate(false) on a dirty schema = %v, want an error wrapping migrate.ErrDirty naming leadership migrate", err)
	}
}
