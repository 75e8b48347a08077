package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	mmysql "github.com/golang-migrate/migrate/v4/database/mysql"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/batchtest"
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

// TestMigrateRefusesToDropAProcedureItCouldNotCreateAgain runs, on a
// server of the test's own, Migrate on a database at schema version 12
// (procedures another user created) as a user lacking CREATE ROUTINE, and
// as one lacking ALTER ROUTINE: migration 0013 drops leadership_acquire
// and 0014 creates it again, so the first user left the schema dirty
// with no procedure (every process in routine mode failing), the second
// left it dirty at 0013. Migrate must fail before the migrations, naming
// the GRANT, and leave the schema and its procedures as they were.
// TestTheFirstAttemptsOfManyFlagsShareOneSchemaCheck sends the first
// attempts of 64 flags of a store in routine mode at once, on a schema
// another store migrated, as a process starting its flags with
// Migrate(false) does: the store reads the schema's version for them one
// at a time, so that the burst takes no more connections than the
// batches of acquires need, where each attempt once took a connection of
// its own to read the version (on a shared server: "Too many
// connections").
func TestTheFirstAttemptsOfManyFlagsShareOneSchemaCheck(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	if err := newStore(t, openDB(t, dsn)).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, dsn)
	db.SetMaxIdleConns(1000) // every connection the burst opens stays open to be counted
	s := newStore(t, db)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			req := leadership.Request{Name: fmt.Sprintf("gate-%02d", i), Holder: "p", Lease: time.Minute}
			if res, err := s.Acquire(context.Background(), req); err != nil || !res.Acquired {
				t.Errorf("Acquire %s = %+v, %v; want acquired", req.Name, res, err)
			}
		})
	}
	wg.Wait()
	// Two batches of acquires in flight at most, and the schema read.
	if n := db.Stats().OpenConnections; n > 3 {
		t.Errorf("the first attempts of 64 flags opened %d connections; want at most 3", n)
	}
}

func TestMigrateRefusesToDropAProcedureItCouldNotCreateAgain(t *testing.T) {
	t.Parallel()
	srv := testdb.StartMariaDB(t)
	ctx := context.Background()
	for _, c := range []struct{ lacks, grants string }{
		{"CREATE ROUTINE", "CREATE, ALTER ROUTINE, SELECT, INSERT, UPDATE, DELETE"},
		{"ALTER ROUTINE", "CREATE, CREATE ROUTINE, SELECT, INSERT, UPDATE, DELETE"},
	} {
		owner := srv.NewDatabase(t, "routines")
		migrateTo(t, owner, 12)
		_, dsn := srv.NewUser(t, owner, "_m", c.grants+" ON %s.*")
		err := newStore(t, openDB(t, dsn)).Migrate(ctx)
		t.Logf("Migrate without %s: %v", c.lacks, err)
		if err == nil || !strings.Contains(err.Error(), "GRANT "+c.lacks) {
			t.Errorf("Migrate without %s = %v, want an error naming GRANT %s", c.lacks, err, c.lacks)
		}
		check := newStore(t, openDB(t, owner))
		if v, dirty, err := check.SchemaVersion(ctx); v != 12 || dirty || err != nil {
			t.Errorf("after Migrate without %s: schema version %d, dirty %v, %v; want 12 as it was", c.lacks, v, dirty, err)
		}
		var n int
		if err := openDB(t, owner).QueryRow(`SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = DATABASE()
AND routine_name IN ('leadership_acquire', 'leadership_acquire_many')`).Scan(&n); err != nil || n != 2 {
			t.Errorf("after Migrate without %s: %d of the two procedures, %v", c.lacks, n, err)
		}
	}
}

// TestMigrateLeavesAnOlderProcedureItCouldNotCreateAgain: Migrate in
// routine mode, by a user who defined the older procedures and may drop
// them (ALTER ROUTINE) but not create one (no CREATE ROUTINE), fails
// naming CREATE ROUTINE and leaves them in place: it dropped them first,
// and every process in routine mode then failed for want of them.
func TestMigrateLeavesAnOlderProcedureItCouldNotCreateAgain(t *testing.T) {
	t.Parallel()
	srv := testdb.StartMariaDB(t)
	ctx := context.Background()
	owner := srv.NewDatabase(t, "older")
	if err := newStore(t, openDB(t, owner)).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cfg, err := driver.ParseDSN(owner)
	if err != nil {
		t.Fatal(err)
	}
	user, dsn := srv.NewUser(t, owner, "_m", "CREATE, ALTER ROUTINE, SELECT, INSERT, UPDATE, DELETE ON %s.*")
	putOlderProcedures(t, srv.Root, "`"+cfg.DBName+"`.", "DEFINER = '"+user+"'@'127.0.0.1' ")
	err = newStore(t, openDB(t, dsn)).Migrate(ctx)
	t.Logf("Migrate by the definer of older procedures without CREATE ROUTINE: %v", err)
	if err == nil || !strings.Contains(err.Error(), "CREATE ROUTINE") {
		t.Errorf("Migrate = %v, want an error naming CREATE ROUTINE", err)
	}
	defs := procedureDefinitions(t, openDB(t, owner))
	for _, name := range []string{"leadership_acquire", "leadership_acquire_many"} {
		if _, ok := defs[name]; !ok {
			t.Errorf("after the failed Migrate the procedure %s is gone", name)
		}
	}
}

// putOlderProcedures replaces, through db, the two procedures by those of
// older migrations (0009 and 0012, which do not re-read the failover
// guard), named with the prefix schema ("`db`." or "") and created with
// the clause definer ("DEFINER = … " or "").
func putOlderProcedures(t *testing.T, db *sql.DB, schema, definer string) {
	t.Helper()
	for name, file := range map[string]string{
		"leadership_acquire":      "mysql/0009_create_guarded_acquire.up.sql",
		"leadership_acquire_many": "mysql/0012_create_batch_acquire.up.sql",
	} {
		body, err := migrations.FS.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		create := strings.Replace(string(body), "CREATE PROCEDURE "+name, "CREATE "+definer+"PROCEDURE "+schema+name, 1)
		for _, q := range []string{"DROP PROCEDURE " + schema + name, create} {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%.80s: %v", q, err)
			}
		}
	}
}

// procedureDefinitions returns the definitions of the two procedures of
// the database db is on ("" for one its user may not read).
func procedureDefinitions(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.Query(`SELECT routine_name, routine_definition FROM information_schema.routines
WHERE routine_schema = DATABASE() AND routine_name IN ('leadership_acquire', 'leadership_acquire_many')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	defs := map[string]string{}
	for rows.Next() {
		var (
			name string
			def  sql.NullString // NULL where the user may not read it
		)
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		defs[name] = def.String
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return defs
}

// checkNewestProcedures fails t unless both procedures are those of the
// newest migrations, which re-read the failover guard (v_hold_now).
func checkNewestProcedures(t *testing.T, db *sql.DB, when string) {
	t.Helper()
	defs := procedureDefinitions(t, db)
	for _, name := range []string{"leadership_acquire", "leadership_acquire_many"} {
		if !strings.Contains(defs[name], "v_hold_now") {
			t.Errorf("%s: the procedure %s is not that of the newest migration (it does not re-read the failover guard)", when, name)
		}
	}
}

// TestStatementModeRefusesToSkipTheReplacementOfProcedures: on a database
// at schema version 12 with the procedures of routine mode (those of 0009
// and 0012, which do not re-read the failover guard before they commit),
// Migrate in statement mode, whose migrations skip routines, fails naming
// the fix and applies nothing: it took the schema to version 16 with the
// older procedures, which routine mode then ran, trusting the version (a
// review saw a term start after a Quarantine returned). Once routine mode
// has migrated it, statement mode migrates too.
func TestStatementModeRefusesToSkipTheReplacementOfProcedures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	migrateTo(t, dsn, 12)
	statements := newStore(t, openDB(t, dsn), mysql.WithoutRoutines())
	err := statements.Migrate(ctx)
	if err == nil {
		t.Fatal("statement mode migrated a database with the procedures of version 12 past their replacement")
	}
	t.Logf("Migrate in statement mode at version 12 with procedures: %v", err)
	for _, want := range []string{"version 12", "routine mode", "leadership migrate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Migrate = %q, want it to name %q", err, want)
		}
	}
	if version, _, err := statements.SchemaVersion(ctx); err != nil || version != 12 {
		t.Fatalf("after the refusal the schema is at version %d (%v), want 12", version, err)
	}
	db := openDB(t, dsn)
	if err := newStore(t, db).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	checkNewestProcedures(t, db, "after Migrate in routine mode")
	if err := newStore(t, openDB(t, dsn), mysql.WithoutRoutines()).Migrate(ctx); err != nil {
		t.Fatalf("Migrate in statement mode after routine mode: %v", err)
	}
}

// TestRoutineModeReplacesOlderProcedures: a database at the newest schema
// version with older procedures (those of 0009 and 0012, as a statement
// mode Migrate left them before it refused to) gets the newest at the next
// Migrate in routine mode, and a term then starts after no Quarantine
// that returned, alone and in a batch.
func TestRoutineModeReplacesOlderProcedures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, together := range []bool{false, true} {
		t.Run(map[bool]string{false: "Alone", true: "InABatch"}[together], func(t *testing.T) {
			t.Parallel()
			dsn := freshDatabase(t, testdb.MySQL(t), nil)
			db := openDB(t, dsn)
			if err := newStore(t, db).Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			putOlderProcedures(t, db, "", "")
			for name, def := range procedureDefinitions(t, db) {
				if strings.Contains(def, "v_hold_now") {
					t.Fatalf("the procedure %s of an older migration re-reads the guard: this test shows nothing", name)
				}
			}
			s := newStore(t, openDB(t, dsn))
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			checkNewestProcedures(t, db, "after Migrate in routine mode")
			other := newStore(t, openDB(t, dsn))
			locks := openDB(t, dsn)
			batchtest.CheckQuarantineHoldsAWaitingTakeover(t, s, other, other.AcquireTogether, func(term leadership.Term) func() {
				tx, err := locks.Begin()
				if err != nil {
					t.Fatal(err)
				}
				if err := mysql.Fence(ctx, tx, term); err != nil {
					t.Fatal(err)
				}
				return func() { _ = tx.Rollback() }
			}, together)
		})
	}
}
