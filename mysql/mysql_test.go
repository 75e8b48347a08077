package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/mysql"
	"github.com/dbflag/leadership/storetest"
)

// TestMain checks for leaked goroutines, except golang-migrate's: when a
// migration fails (TestReadOnlyUserCannotMigrate on a database with
// migrations pending), the goroutines that buffered the migrations it did
// not reach stay blocked on their pipes, and nothing outside golang-migrate
// can unblock them (v4.20.1, Migrate.readUp and Migration.Buffer).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/golang-migrate/migrate/v4.(*Migration).Buffer"))
}

// newestSchema is the version of the newest migration in migrations/mysql.
const newestSchema = 16

// openDB opens a *sql.DB of its own (a "process") on dsn.
func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newStore(t testing.TB, db *sql.DB, opts ...mysql.Option) *mysql.Store {
	t.Helper()
	s, err := mysql.New(db, opts...)
	if err != nil {
		t.Fatalf("mysql.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// freshDatabase creates a database of its own for the test and returns dsn
// pointing at it with the extra DSN parameters params applied.
func freshDatabase(t testing.TB, dsn string, params map[string]string) string {
	t.Helper()
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var b [5]byte
	_, _ = rand.Read(b[:])
	name := cfg.DBName + "_t" + hex.EncodeToString(b[:])
	admin := openDB(t, dsn)
	if _, err := admin.Exec("CREATE DATABASE `" + name + "`"); err != nil {
		t.Fatalf("create database %s (scripts/test-databases.sh grants it on %s_%%): %v", name, cfg.DBName, err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE `" + name + "`") })
	cfg.DBName = name
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	for k, v := range params {
		switch k {
		case "clientFoundRows":
			cfg.ClientFoundRows = v == "true"
		case "parseTime":
			cfg.ParseTime = v == "true"
		case "interpolateParams":
			cfg.InterpolateParams = v == "true"
		case "loc":
			loc, err := time.LoadLocation(v)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Loc = loc
		default:
			cfg.Params[k] = v // a system variable of the session
		}
	}
	return cfg.FormatDSN()
}

// runSuite runs the store suite on dsn, every store with a *sql.DB of its
// own, as separate processes have.
func runSuite(t *testing.T, dsn string, opts ...mysql.Option) {
	storetest.Run(t, func(t testing.TB) leadership.Store { return newStore(t, openDB(t, dsn), opts...) })
}

// modes are the store's two ways to acquire: the procedure (the default)
// and plain statements (WithoutRoutines).
var modes = []struct {
	name string
	opts []mysql.Option
}{{"routine", nil}, {"statement", []mysql.Option{mysql.WithoutRoutines()}}}

// inModes runs test once in each mode, in parallel subtests.
func inModes(t *testing.T, test func(t *testing.T, opts ...mysql.Option)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			test(t, m.opts...)
		})
	}
}

func isMariaDB(t testing.TB, db *sql.DB) bool {
	t.Helper()
	var v string
	if err := db.QueryRow(`SELECT VERSION()`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return strings.Contains(strings.ToLower(v), "mariadb")
}

// TestConformance runs the store suite on a real server, every store with
// a *sql.DB of its own, as separate processes have.
func TestConformance(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	runSuite(t, dsn)
}

// TestConformanceSimultaneousAssignment runs the contract with the
// procedure created, and called, under MariaDB's SIMULTANEOUS_ASSIGNMENT
// sql mode, in which the assignments of ON DUPLICATE KEY UPDATE all see
// the old row.
func TestConformanceSimultaneousAssignment(t *testing.T) {
	t.Parallel()
	base := testdb.MySQL(t)
	if !isMariaDB(t, openDB(t, base)) {
		t.Skip("SIMULTANEOUS_ASSIGNMENT is a MariaDB sql mode; this server is MySQL")
	}
	dsn := freshDatabase(t, base, map[string]string{"sql_mode": "'SIMULTANEOUS_ASSIGNMENT,STRICT_TRANS_TABLES'"})
	db := openDB(t, dsn)
	if err := newStore(t, db).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := db.QueryRow(`SELECT sql_mode FROM information_schema.routines
		WHERE routine_schema = DATABASE() AND routine_name = 'leadership_acquire'`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(mode, "SIMULTANEOUS_ASSIGNMENT") {
		t.Fatalf("the procedure's sql_mode is %q, want SIMULTANEOUS_ASSIGNMENT", mode)
	}
	runSuite(t, dsn)
}

// TestConformanceWhateverTheDSN runs the contract with the DSN settings
// that change how the driver reports rows and times.
func TestConformanceWhateverTheDSN(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), map[string]string{
		"clientFoundRows":   "true",
		"parseTime":         "true",
		"interpolateParams": "true",
		"loc":               "Asia/Tokyo",
		"time_zone":         "'-07:00'",
	})
	storetest.RunContract(t, func(t testing.TB) leadership.Store { return newStore(t, openDB(t, dsn)) })

	// The database clock reads the same instant whatever the session's
	// time zone: the server runs on this machine, so it agrees with
	// time.Now to well within a few seconds.
	_, now, err := newStore(t, openDB(t, dsn)).Flags(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(now); d < -5*time.Second || d > 5*time.Second {
		t.Fatalf("database clock %v is %v away from this machine's; a time zone leaked into it", now, d)
	}
}

// TestMigrateLeavesDBOpen checks that applying migrations (twice) neither
// closes the caller's *sql.DB nor keeps a connection.
func TestMigrateLeavesDBOpen(t *testing.T) {
	t.Parallel()
	db := openDB(t, freshDatabase(t, testdb.MySQL(t), nil))
	s := newStore(t, db)
	for range 2 {
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if v, dirty, err := s.SchemaVersion(context.Background()); err != nil || v != newestSchema || dirty {
		t.Fatalf("SchemaVersion = %d, %v, %v; want %d, false, nil", v, dirty, err, newestSchema)
	}
	if err := db.Ping(); err != nil {
		t.Fatalf("the db is unusable after Migrate: %v", err)
	}
	if n := db.Stats().InUse; n != 0 {
		t.Fatalf("%d connections still in use after Migrate", n)
	}
}

// TestAcquireIsOneRoundTrip checks the package documentation's "one round
// trip" with a DSN without interpolateParams: once the connection has the
// statement, an attempt is one statement sent by the client and prepares
// nothing.
func TestAcquireIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	checkStatementsPerAttempt(t, 1)
}

// checkStatementsPerAttempt checks, on a session of its own, that a
// renewal by a store with opts sends want statements and, once the
// connection has them, prepares nothing.
func checkStatementsPerAttempt(t *testing.T, want int64, opts ...mysql.Option) {
	t.Helper()
	db := openDB(t, freshDatabase(t, testdb.MySQL(t), nil))
	db.SetMaxOpenConns(1) // one session: the counters below are the store's
	s := newStore(t, db, opts...)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(ctx, leadership.Request{Name: "round-trips", Holder: "a", Lease: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	const attempts = 20
	before := sessionStatus(t, db)
	for range attempts {
		if res, err = s.Acquire(ctx, leadership.Request{Name: "round-trips", Holder: "a", Version: res.Version, Lease: time.Minute}); err != nil || !res.Acquired {
			t.Fatalf("renewal = %+v, %v", res, err)
		}
	}
	after := sessionStatus(t, db)
	if d := after["Com_stmt_prepare"] - before["Com_stmt_prepare"]; d != 0 {
		t.Errorf("%d attempts prepared %d statements, want none", attempts, d)
	}
	// Questions also counts the SHOW STATUS that read the second figures.
	if d := after["Questions"] - before["Questions"] - 1; d != want*attempts {
		t.Errorf("%d attempts sent %d statements, want %d each", attempts, d, want)
	}
}

// sessionStatus reads the statement counters of db's session; db must have
// one connection.
func sessionStatus(t *testing.T, db *sql.DB) map[string]int64 {
	t.Helper()
	rows, err := db.Query(`SHOW SESSION STATUS WHERE Variable_name IN ('Com_stmt_prepare', 'Questions')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	status := map[string]int64{}
	for rows.Next() {
		var name string
		var value int64
		if err := rows.Scan(&name, &value); err != nil {
			t.Fatal(err)
		}
		status[name] = value
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(status) != 2 {
		t.Fatalf("session status = %v, want Com_stmt_prepare and Questions", status)
	}
	return status
}

func TestReadOnlyUserCannotMigrate(t *testing.T) {
	t.Parallel()
	cfg, err := driver.ParseDSN(testdb.MySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = "lead_ro", "lead"
	db := openDB(t, cfg.FormatDSN())
	if err := db.Ping(); err != nil {
		testdb.Unavailable(t, "user lead_ro", testdb.EnvMySQL, err.Error())
	}
	_, err = leadership.NewFlag().Store(newStore(t, db)).Name("ro").Build(context.Background())
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Build as a read-only user = %v, want a permission error", err)
	}
}

// TestSetupFailures: a nil db, a hand-made table of the wrong shape and a
// server that is down each fail with an error that says what to fix.
func TestSetupFailures(t *testing.T) {
	storetest.RunSetupFailures(t, storetest.Setup{
		NewNil: func() error { _, err := mysql.New(nil); return err },
		WrongShape: func(t testing.TB) leadership.Store {
			db := openDB(t, freshDatabase(t, testdb.MySQL(t), nil))
			if _, err := db.Exec(`CREATE TABLE leadership_flags (name VARCHAR(255) PRIMARY KEY, holder TEXT, version TEXT)`); err != nil {
				t.Fatal(err)
			}
			return newStore(t, db)
		},
		ShapeError: []string{"wrong shape", "version bigint"},
		Unreachable: func(t testing.TB, addr string) (leadership.Store, string) {
			return newStore(t, openDB(t, "app:secret-password@tcp("+addr+")/db?timeout=2s")), "secret-password"
		},
		UnreachableError: "connect",
	})
}

// TestNamesAreCaseAndAccentSensitive checks the collation the migration
// gives names (utf8mb4_bin): names that MySQL's default collations hold
// equal are different flags, as in the other stores.
func TestNamesAreCaseAndAccentSensitive(t *testing.T) {
	t.Parallel()
	s := newStore(t, openDB(t, freshDatabase(t, testdb.MySQL(t), nil)))
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, names := range [][2]string{{"Report", "report"}, {"café", "cafe"}, {"straße", "strasse"}} {
		for i, name := range names {
			res, err := s.Acquire(ctx, leadership.Request{Name: name, Holder: names[0], Lease: time.Minute})
			if err != nil || !res.Acquired || res.Version != 1 {
				t.Fatalf("Acquire(%q) after %q = %+v, %v; want a flag of its own", name, names[:i], res, err)
			}
		}
	}
}

func TestWrongPassword(t *testing.T) {
	t.Parallel()
	cfg, err := driver.ParseDSN(testdb.MySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Passwd = "not-the-secret-password"
	db := openDB(t, cfg.FormatDSN())
	_, err = leadership.NewFlag().Store(newStore(t, db)).Name("x").Build(context.Background())
	if err == nil || !strings.Contains(err.Error(), "password") {
		t.Fatalf("Build with a wrong password = %v, want a login error", err)
	}
	if strings.Contains(err.Error(), "not-the-secret-password") {
		t.Fatalf("the error shows the password: %v", err)
	}
}

// TestDirtySchemaFailsBuild marks the version dirty, as a golang-migrate
// run that failed half-way leaves it: Build fails at once and says how to
// fix it.
func TestDirtySchemaFailsBuild(t *testing.T) {
	t.Parallel()
	db := openDB(t, freshDatabase(t, testdb.MySQL(t), nil))
	s := newStore(t, db)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE leadership_schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	// A process that starts now: a store that has migrated once does not
	// migrate (nor check) again.
	testdb.CheckDirtyBuild(t, newStore(t, db), "mysql", newestSchema)
}

// TestARowWithANullIsUnreadable lists the flags of a table whose NOT NULL
// constraints were dropped by hand, with a NULL written in a different
// column of each of four rows: Flags returns every row, those four with
// their names only, and names each in an error, a
// sqlstore.UnreadableRows, instead of listing a NULL holder as free or a
// NULL version as 0.
func TestARowWithANullIsUnreadable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t, freshDatabase(t, testdb.MySQL(t), nil))
	s := newStore(t, db)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	columns := map[string]string{"holder": "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", "version": "BIGINT", "renewed_at": "BIGINT", "expires_at": "BIGINT"}
	if res, err := s.Acquire(ctx, leadership.Request{Name: "good", Holder: "a", Lease: time.Minute}); err != nil || !res.Acquired {
		t.Fatalf("acquire good = %+v, %v", res, err)
	}
	var names []string
	for c, typ := range columns {
		names = append(names, c)
		if res, err := s.Acquire(ctx, leadership.Request{Name: c, Holder: "a", Lease: time.Minute}); err != nil || !res.Acquired {
			t.Fatalf("acquire %s = %+v, %v", c, res, err)
		}
		for _, q := range []string{
			`ALTER TABLE leadership_flags MODIFY ` + c + ` ` + typ + ` NULL`,
			`UPDATE leadership_flags SET ` + c + ` = NULL WHERE name = '` + c + `'`,
		} {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	recs, _, err := s.Flags(ctx)
	testdb.CheckUnreadable(t, recs, err, "good", names)
}
