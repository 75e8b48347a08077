package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/postgres"
	"github.com/dbflag/leadership/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newPool opens a pool of its own (a "process") on dsn.
func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func newStore(t testing.TB, pool *pgxpool.Pool) *postgres.Store {
	t.Helper()
	s, err := postgres.New(pool)
	if err != nil {
		t.Fatalf("postgres.New: %v", err)
	}
	return s
}

// schemaDSN creates a fresh schema on the server of dsn and returns dsn
// with search_path set to it, so a test gets tables of its own.
func schemaDSN(t testing.TB, dsn string) string {
	t.Helper()
	return testdb.PostgresSchema(t, dsn)
}

// withParam returns dsn with the run-time parameter key set to value.
func withParam(t testing.TB, dsn, key, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

func randomHex() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TestConformance runs the store suite on a real server, every store with
// a pool of its own, as separate processes have.
func TestConformance(t *testing.T) {
	t.Parallel()
	dsn := testdb.Postgres(t)
	storetest.Run(t, func(t testing.TB) leadership.Store { return newStore(t, newPool(t, dsn)) })
}

// TestConformanceInOwnSchema runs the store contract in a non-default schema
// chosen through search_path.
func TestConformanceInOwnSchema(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	storetest.RunContract(t, func(t testing.TB) leadership.Store { return newStore(t, newPool(t, dsn)) })
	pool := newPool(t, dsn)
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_name IN ('leadership_flags', 'leadership_schema_migrations')`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("tables in the test schema: %d, %v; want both", n, err)
	}
}

// withoutNotify hides the store's ReleaseNotifier, so flags only poll.
type withoutNotify struct{ leadership.Store }

// TestNotifyMakesHandoverPrompt measures a graceful handover with and
// without LISTEN/NOTIFY, with a poll interval long enough that only a
// notification explains a prompt handover.
func TestNotifyMakesHandoverPrompt(t *testing.T) {
	t.Parallel()
	dsn := testdb.Postgres(t)
	const poll = 3 * time.Second
	handover := func(t *testing.T, wrap func(leadership.Store) leadership.Store) time.Duration {
		name := "handover-" + t.Name() + "-" + time.Now().Format("150405.000000")
		var store *postgres.Store
		build := func() *leadership.Flag {
			store = newStore(t, newPool(t, dsn))
			f, err := leadership.NewFlag().Store(wrap(store)).Name(name).
				Lease(10 * time.Second).PollInterval(poll).Jitter(0).Build(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.Close() })
			return f
		}
		leader, follower := build(), build()
		if !leader.Raised() || follower.Raised() {
			t.Fatal("want the first flag leading")
		}
		time.Sleep(200 * time.Millisecond) // the follower is now waiting out its poll
		if _, notifies := wrap(store).(leadership.ReleaseNotifier); notifies {
			// The follower's listener is up once its own probe arrived.
			for deadline := time.Now().Add(10 * time.Second); !store.NotifiesOtherProcesses(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the follower's store reports no notifications 10 s after Build")
				}
			}
		}
		start := time.Now()
		if err := leader.Close(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*poll)
		defer cancel()
		if err := follower.Wait(ctx); err != nil {
			t.Fatalf("no handover within %v: %v", 2*poll, err)
		}
		return time.Since(start)
	}
	withNotify := handover(t, func(s leadership.Store) leadership.Store { return s })
	polling := handover(t, func(s leadership.Store) leadership.Store { return withoutNotify{s} })
	t.Logf("graceful handover: %v with NOTIFY, %v by polling (poll interval %v)", withNotify, polling, poll)
	if withNotify > poll/4 {
		t.Errorf("handover with NOTIFY took %v, want well under the poll interval %v", withNotify, poll)
	}
}

// TestListenerReconnects kills the listening backend and shows that
// notifications resume.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	dsn := testdb.Postgres(t)
	// Its own application_name tells this store's listener apart from the
	// listeners of tests running in parallel.
	app := "lt-reconnect-" + randomHex()
	pool := newPool(t, withParam(t, dsn, "application_name", app))
	s := newStore(t, pool)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	name := "listener-" + time.Now().Format("150405.000000")
	ch, stop := s.NotifyReleases(name)
	defer stop()
	other := newStore(t, newPool(t, dsn))
	release := func() {
		t.Helper()
		res, err := other.Acquire(context.Background(), leadership.Request{Name: name, Holder: "x", Version: 0, Lease: time.Minute})
		if err != nil || !res.Acquired {
			t.Fatalf("acquire: %+v %v", res, err)
		}
		if ok, err := other.Release(context.Background(), name, "x", res.Version); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
	}
	expect := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("no notification %s", what)
		}
	}
	waitListening(t, pool, app, 1)
	release()
	expect("before the listener's connection is killed")

	admin := newPool(t, dsn)
	var killed int
	if err := admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query LIKE 'LISTEN %' AND application_name = $1`, app).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("listening backends terminated: %d, %v; want 1", killed, err)
	}
	// Nothing was released since: this is the wake-up the listener sends
	// every flag once it is back, in case it missed a release.
	expect("when the listener is back")
	waitListening(t, pool, app, 1)
	release()
	expect("after the listener reconnected")
}

// TestOneListenerPerStore checks that a store keeps one LISTEN connection
// for all its subscriptions, from the first until the last one ends.
func TestOneListenerPerStore(t *testing.T) {
	t.Parallel()
	app := "lt-one-" + randomHex()
	pool := newPool(t, withParam(t, testdb.Postgres(t), "application_name", app))
	s := newStore(t, pool)
	_, stopA := s.NotifyReleases("a")
	_, stopB := s.NotifyReleases("b")
	waitListening(t, pool, app, 1)
	time.Sleep(200 * time.Millisecond) // time for a second listener to show
	if n := listening(t, pool, app); n != 1 {
		t.Fatalf("%d listening connections for two subscriptions, want 1", n)
	}
	stopA()
	if n := listening(t, pool, app); n != 1 {
		t.Fatalf("%d listening connections after one of two subscriptions ended, want 1", n)
	}
	stopB()
	waitListening(t, pool, app, 0)
}

// listening counts the backends with application_name app that listen.
func listening(t *testing.T, pool *pgxpool.Pool, app string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE query LIKE 'LISTEN %' AND application_name = $1`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitListening waits until want backends with application_name app
// listen.
func waitListening(t *testing.T, pool *pgxpool.Pool, app string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for listening(t, pool, app) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d listening connections after 10 s, want %d", listening(t, pool, app), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNotificationsStayInTheirSchema shows that a release in one schema
// does not wake flags of the same name in another.
func TestNotificationsStayInTheirSchema(t *testing.T) {
	t.Parallel()
	base := testdb.Postgres(t)
	a, b := newStore(t, newPool(t, schemaDSN(t, base))), newStore(t, newPool(t, schemaDSN(t, base)))
	for _, s := range []*postgres.Store{a, b} {
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	chB, stop := b.NotifyReleases("same-name")
	defer stop()
	res, err := a.Acquire(context.Background(), leadership.Request{Name: "same-name", Holder: "x", Lease: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	time.Sleep(500 * time.Millisecond) // b's listener is up by now
	if _, err := a.Release(context.Background(), "same-name", "x", res.Version); err != nil {
		t.Fatal(err)
	}
	select {
	case <-chB:
		t.Fatal("a release in schema A woke a flag in schema B")
	case <-time.After(500 * time.Millisecond):
	}
}

// TestMigrateLeavesPoolUsableAndClosable checks that applying migrations
// neither closes the caller's pool nor keeps pool.Close from returning.
func TestMigrateLeavesPoolUsableAndClosable(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, pool)
	for range 2 {
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if v, dirty, err := s.SchemaVersion(context.Background()); err != nil || v != 2 || dirty {
		t.Fatalf("SchemaVersion = %d, %v, %v; want 2, false, nil", v, dirty, err)
	}
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatalf("the pool is unusable after Migrate: %v", err)
	}
	closed := make(chan struct{})
	go func() { pool.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("pool.Close hangs after Migrate")
	}
}

func TestMissingCreatePrivilege(t *testing.T) {
	t.Parallel()
	base := testdb.Postgres(t)
	dsn := schemaDSN(t, base)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// The role may use the schema but not create in it.
	if _, err := newPool(t, base).Exec(context.Background(), `GRANT USAGE ON SCHEMA `+u.Query().Get("search_path")+` TO lead_noddl`); err != nil {
		testdb.Unavailable(t, "role lead_noddl", testdb.EnvPostgres, err.Error())
	}
	u.User = url.UserPassword("lead_noddl", "lead")
	pool, err := pgxpool.New(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.Ping(context.Background()); err != nil {
		testdb.Unavailable(t, "role lead_noddl", testdb.EnvPostgres, err.Error())
	}
	err = newStore(t, pool).Migrate(context.Background())
	if err == nil || !strings.Contains(err.Error(), "needs CREATE") || strings.Contains(err.Error(), "lead@") {
		t.Fatalf("Migrate without CREATE = %v, want an error saying CREATE is needed", err)
	}

	// Once an administrator applied the migrations, the role needs only the
	// privileges the package documentation lists.
	admin := newPool(t, dsn)
	if err := newStore(t, admin).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(context.Background(), `GRANT SELECT, INSERT, UPDATE ON leadership_flags TO lead_noddl;
		GRANT SELECT, INSERT ON leadership_incarnation TO lead_noddl;
		GRANT SELECT, UPDATE ON leadership_guard TO lead_noddl;
		GRANT SELECT ON leadership_schema_migrations TO lead_noddl`); err != nil {
		t.Fatal(err)
	}
	f, err := leadership.NewFlag().Store(newStore(t, pool)).Name("dml-only").Build(context.Background())
	if err != nil {
		t.Fatalf("Build with DML privileges after an administrator migrated: %v", err)
	}
	if !f.Raised() {
		t.Error("the flag did not rise")
	}
	if err := f.Close(); err != nil {
		t.Error(err)
	}
}

// TestSetupFailures: a nil pool, a hand-made table of the wrong shape and
// a server that is down each fail with an error that says what to fix.
func TestSetupFailures(t *testing.T) {
	storetest.RunSetupFailures(t, storetest.Setup{
		NewNil: func() error { _, err := postgres.New(nil); return err },
		WrongShape: func(t testing.TB) leadership.Store {
			pool := newPool(t, schemaDSN(t, testdb.Postgres(t)))
			if _, err := pool.Exec(context.Background(), `CREATE TABLE leadership_flags (name text PRIMARY KEY, holder text, version text)`); err != nil {
				t.Fatal(err)
			}
			return newStore(t, pool)
		},
		ShapeError: []string{"wrong shape", "version bigint"},
		Unreachable: func(t testing.TB, addr string) (leadership.Store, string) {
			return newStore(t, newPool(t, "postgres://app:secret-password@"+addr+"/db?connect_timeout=2")), "secret-password"
		},
		UnreachableError: "connect",
	})
}

// TestDirtySchemaFailsBuild marks the version dirty, as a golang-migrate
// run that failed half-way leaves it: Build fails at once and says how to
// fix it.
func TestDirtySchemaFailsBuild(t *testing.T) {
	t.Parallel()
	pool := newPool(t, schemaDSN(t, testdb.Postgres(t)))
	s := newStore(t, pool)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `UPDATE leadership_schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	// A process that starts now: a store that has migrated once does not
	// migrate (nor check) again.
	testdb.CheckDirtyBuild(t, newStore(t, pool), "postgres", 2)
}
