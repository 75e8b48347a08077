package mysql_test

import (
	"context"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/mysql"
	"github.com/dbflag/leadership/storetest"
)

var statementMode = mysql.WithoutRoutines()

// TestConformanceStatementMode runs the store suite in statement mode with
// the default DSN, under MariaDB's SIMULTANEOUS_ASSIGNMENT, and with the
// DSN settings that change how the driver reports rows and times.
// (Autocommit off: TestConformanceAutocommitOff and
// TestConformanceServerAutocommitOff run both modes.)
func TestConformanceStatementMode(t *testing.T) {
	t.Parallel()
	base := testdb.MySQL(t)
	t.Run("default", func(t *testing.T) {
		t.Parallel()
		runSuite(t, freshDatabase(t, base, nil), statementMode)
	})
	t.Run("simultaneous_assignment", func(t *testing.T) {
		t.Parallel()
		if !isMariaDB(t, openDB(t, base)) {
			t.Skip("SIMULTANEOUS_ASSIGNMENT is a MariaDB sql mode; this server is MySQL")
		}
		runSuite(t, freshDatabase(t, base, map[string]string{"sql_mode": "'SIMULTANEOUS_ASSIGNMENT,STRICT_TRANS_TABLES'"}), statementMode)
	})
	t.Run("dsn_settings", func(t *testing.T) {
		t.Parallel()
		dsn := freshDatabase(t, base, map[string]string{
			"clientFoundRows": "true", "parseTime": "true", "interpolateParams": "true",
			"loc": "Asia/Tokyo", "time_zone": "'-07:00'",
		})
		storetest.RunContract(t, func(t testing.TB) leadership.Store { return newStore(t, openDB(t, dsn), statementMode) })
	})
}

// adminMigrated is a store of an application user whose Migrate is run by
// another store, as when an administrator applies the migrations.
type adminMigrated struct {
	*mysql.Store
	admin *mysql.Store
}

func (s adminMigrated) Migrate(ctx context.Context) error { return s.admin.Migrate(ctx) }

// TestStatementModeNeedsNoRoutinePrivileges is the managed server that
// does not let the application create or execute routines. On a MariaDB
// server of the test's own, a user with CREATE, SELECT, INSERT, UPDATE and
// DELETE on the database but neither CREATE ROUTINE nor EXECUTE cannot
// migrate in routine mode (the error names statement mode) and can in
// statement mode, which creates no routine; then the whole store suite
// runs as an application user with SELECT, INSERT, UPDATE on the flag
// table, SELECT, UPDATE on the guard's record, SELECT, INSERT on the
// incarnation table and SELECT on the version table only.
func TestStatementModeNeedsNoRoutinePrivileges(t *testing.T) {
	t.Parallel()
	srv := testdb.StartMariaDB(t)
	root := srv.NewDatabase(t, "norout") // all privileges on the database
	cfg, err := driver.ParseDSN(root)
	if err != nil {
		t.Fatal(err)
	}
	db := cfg.DBName
	_, migrator := srv.NewUser(t, root, "_m", "CREATE, SELECT, INSERT, UPDATE, DELETE ON %s.*")
	ctx := context.Background()

	err = newStore(t, openDB(t, migrator)).Migrate(ctx)
	if err == nil || !strings.Contains(err.Error(), "permission denied") || !strings.Contains(err.Error(), "WithoutRoutines") {
		t.Fatalf("Migrate in routine mode without CREATE ROUTINE = %v, want a permission error naming statement mode", err)
	}
	if _, err := srv.Root.Exec("DROP DATABASE `" + db + "`"); err != nil { // routine mode left it dirty
		t.Fatal(err)
	}
	if _, err := srv.Root.Exec("CREATE DATABASE `" + db + "`"); err != nil {
		t.Fatal(err)
	}
	admin := newStore(t, openDB(t, migrator), statementMode)
	if err := admin.Migrate(ctx); err != nil {
		t.Fatalf("Migrate in statement mode without CREATE ROUTINE: %v", err)
	}
	if v, dirty, err := admin.SchemaVersion(ctx); err != nil || v != newestSchema || dirty {
		t.Fatalf("SchemaVersion after statement mode's Migrate = %d, %v, %v; want %d, false, nil", v, dirty, err, newestSchema)
	}
	var routines int
	if err := srv.Root.QueryRow(`SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = ?`, db).Scan(&routines); err != nil || routines != 0 {
		t.Fatalf("statement mode's Migrate left %d routines (%v), want none", routines, err)
	}

	_, app := srv.NewUser(t, root, "_a",
		"SELECT, INSERT, UPDATE ON %s.leadership_flags",
		"SELECT ON %s.leadership_schema_migrations",
		"SELECT, UPDATE ON %s.leadership_guard",
		"SELECT, INSERT ON %s.leadership_incarnation")
	storetest.Run(t, func(t testing.TB) leadership.Store {
		return adminMigrated{newStore(t, openDB(t, app), statementMode), admin}
	})
}

// TestModesShareADatabase moves one database between the modes: migrated
// in statement mode (no procedure), it gets the procedure at the first
// Migrate in routine mode, and processes in either mode then see each
// other's terms.
func TestModesShareADatabase(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	stmt := newStore(t, openDB(t, dsn), statementMode)
	routine := newStore(t, openDB(t, dsn))
	ctx := context.Background()
	if err := stmt.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := routine.Acquire(ctx, leadership.Request{Name: "f", Holder: "r", Lease: time.Minute}); err == nil {
		t.Fatal("routine mode acquired on a database migrated in statement mode, which has no procedure")
	}
	if err := routine.Migrate(ctx); err != nil {
		t.Fatalf("Migrate in routine mode after statement mode: %v", err)
	}
	if err := stmt.Migrate(ctx); err != nil {
		t.Fatalf("Migrate in statement mode after routine mode: %v", err)
	}
	won, err := stmt.Acquire(ctx, leadership.Request{Name: "f", Holder: "s", Lease: time.Minute})
	if err != nil || !won.Acquired || won.Version != 1 {
		t.Fatalf("statement mode: Acquire = %+v, %v; want version 1", won, err)
	}
	lost, err := routine.Acquire(ctx, leadership.Request{Name: "f", Holder: "r", Lease: time.Minute})
	if err != nil || lost.Acquired || lost.Holder != "s" || lost.Version != 1 {
		t.Fatalf("routine mode while statement mode holds = %+v, %v; want s's term", lost, err)
	}
	if ok, err := stmt.Release(ctx, "f", "s", 1); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	next, err := routine.Acquire(ctx, leadership.Request{Name: "f", Holder: "r", Lease: time.Minute})
	if err != nil || !next.Acquired || next.Version != 2 {
		t.Fatalf("routine mode after the release = %+v, %v; want version 2", next, err)
	}
	lost, err = stmt.Acquire(ctx, leadership.Request{Name: "f", Holder: "s", Version: 1, Lease: time.Minute})
	if err != nil || lost.Acquired || lost.Holder != "r" || lost.Version != 2 || !lost.ExpiresAt.After(lost.Now) {
		t.Fatalf("statement mode renewing its released term = %+v, %v; want r's term 2, expiring after Now", lost, err)
	}
}

// TestStatementModeAcquireIsOneTransaction checks the cost
// WithoutRoutines documents: an attempt is six statements (START
// TRANSACTION, the guard read, the upsert, the read of the row, the
// guard's locked re-read, COMMIT) and, once the connection has them,
// prepares nothing.
func TestStatementModeAcquireIsOneTransaction(t *testing.T) {
	t.Parallel()
	checkStatementsPerAttempt(t, 6, statementMode)
}
