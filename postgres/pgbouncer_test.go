package postgres_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mdatabase "github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/migrations"
	"github.com/dbflag/leadership/postgres"
	"github.com/dbflag/leadership/storetest"
)

// The tests in this file go through the PgBouncer in transaction pooling
// mode that scripts/test-databases.sh starts (LEADERSHIP_TEST_PGBOUNCER_DSN,
// Debian's PgBouncer 1.18) in front of the server of
// LEADERSHIP_TEST_POSTGRES_DSN. PgBouncer 1.18 refuses the startup
// parameter search_path, so they use the public schema, where the schema
// is applied over a direct connection first: the deployment recipe.

// bouncer returns the PgBouncer DSN with pgx's query exec mode set (""
// keeps pgx's default, the statement cache), after applying the
// migrations over a direct connection.
func bouncer(t *testing.T, execMode string) string {
	t.Helper()
	if err := newStore(t, newPool(t, testdb.Postgres(t))).Migrate(context.Background()); err != nil {
		t.Fatalf("migrate over the direct connection: %v", err)
	}
	dsn := testdb.PgBouncer(t)
	if execMode != "" {
		dsn = withParam(t, dsn, "default_query_exec_mode", execMode)
	}
	return dsn
}

// maxPoll caps the default poll interval of a flag whose store reports its
// notifications unavailable (see leadership.FlagBuilder.PollInterval).
const maxPoll = 2 * time.Second

// migratedDirectly is a store behind the pooler whose Migrate applies the
// schema over a direct connection, as the deployment recipe does.
type migratedDirectly struct {
	*postgres.Store
	direct *postgres.Store
}

func (s migratedDirectly) Migrate(ctx context.Context) error { return s.direct.Migrate(ctx) }

// TestConformanceThroughPgBouncer runs the store suite through PgBouncer
// in transaction mode, with the two pgx exec modes that need no prepared
// statement kept between transactions: all of it with the simple protocol,
// the Store contract with exec.
func TestConformanceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"simple_protocol", "exec"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dsn := bouncer(t, mode)
			direct := newStore(t, newPool(t, testdb.Postgres(t)))
			open := func(t testing.TB) leadership.Store {
				return migratedDirectly{Store: newStore(t, newPool(t, dsn)), direct: direct}
			}
			if mode == "simple_protocol" {
				storetest.Run(t, open)
			} else {
				storetest.RunContract(t, open)
			}
		})
	}
}

// logRecorder keeps the messages of the records logged through it.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Level.String()+" "+r.Message)
	return nil
}

func (h *logRecorder) has(prefix string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(h.msgs, func(m string) bool { return strings.HasPrefix(m, prefix) })
}

// TestDetectsThatNotificationsDoNotArriveThroughPgBouncer checks that a
// store behind a pooler in transaction mode reports its notifications
// unavailable (so flags poll at the short interval), warns, and never
// runs LISTEN there, while a store connected directly reports them
// available.
func TestDetectsThatNotificationsDoNotArriveThroughPgBouncer(t *testing.T) {
	t.Parallel()
	// One server connection behind the pooler, so that any client of it
	// sees whether the store made that server session LISTEN.
	dsn := singleServer(t, bouncer(t, "simple_protocol"))
	rec := &logRecorder{}
	pooled, err := postgres.New(newPool(t, dsn), postgres.WithLogger(slog.New(rec)))
	if err != nil {
		t.Fatal(err)
	}
	direct := newStore(t, newPool(t, testdb.Postgres(t)))
	name := "probe-" + randomHex()
	chPooled, stopPooled := pooled.NotifyReleases(name)
	defer stopPooled()
	_, stopDirect := direct.NotifyReleases(name)
	defer stopDirect()

	deadline := time.Now().Add(10 * time.Second)
	for !direct.NotifiesOtherProcesses() {
		if time.Now().After(deadline) {
			t.Fatal("the directly connected store did not report its notifications available within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The premise: a release notified on the database does not reach the
	// listener behind the pooler.
	res, err := direct.Acquire(context.Background(), leadership.Request{Name: name, Holder: "x", Lease: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	if ok, err := direct.Release(context.Background(), name, "x", res.Version); err != nil || !ok {
		t.Fatalf("release: %v, %v", ok, err)
	}
	deadline = time.Now().Add(postgres.ProbeTimeout + 2*time.Second)
	for !rec.has("WARN release notifications") {
		if pooled.NotifiesOtherProcesses() {
			t.Fatal("the store behind PgBouncer (transaction mode) reports its release notifications available")
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warning %v after the listener started; logged: %q", postgres.ProbeTimeout+2*time.Second, rec.msgs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-chPooled:
		t.Fatal("a notification reached the listener behind PgBouncer: the premise of this test is wrong")
	default:
	}
	if pooled.NotifiesOtherProcesses() {
		t.Fatal("the store behind PgBouncer reports its release notifications available")
	}
	// A LISTEN through the pooler would have stayed on the server session
	// that other clients use.
	var channels []string
	if err := newPool(t, dsn).QueryRow(context.Background(), `SELECT coalesce(array_agg(c), '{}') FROM pg_listening_channels() c`).Scan(&channels); err != nil {
		t.Fatal(err)
	}
	if len(channels) != 0 {
		t.Fatalf("the server session behind PgBouncer listens on %q: the store ran LISTEN through the pooler", channels)
	}
	if !rec.has("WARN release notifications are off: a connection pooler") {
		t.Errorf("no warning naming the pooler; logged: %q", rec.msgs)
	}
}

// singleServer returns the PgBouncer DSN on its database of one server
// connection, where every client shares one server session.
func singleServer(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path += "_single"
	return u.String()
}

// TestWithoutNotificationsKeepsNoListener checks the explicit option: no
// listening connection, no wake-ups, and flags on the default poll
// interval poll at the short one.
func TestWithoutNotificationsKeepsNoListener(t *testing.T) {
	t.Parallel()
	app := "lt-nolisten-" + randomHex()
	pool := newPool(t, withParam(t, testdb.Postgres(t), "application_name", app))
	s, err := postgres.New(pool, postgres.WithoutNotifications())
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := s.NotifyReleases("x")
	defer stop()
	time.Sleep(300 * time.Millisecond) // time for a listener to show
	if n := listening(t, pool, app); n != 0 {
		t.Fatalf("%d listening connections with WithoutNotifications, want 0", n)
	}
	if ch != nil || s.NotifiesOtherProcesses() {
		t.Fatalf("WithoutNotifications: channel %v, NotifiesOtherProcesses %v; want nil, false", ch, s.NotifiesOtherProcesses())
	}
}

// TestHandoverThroughPgBouncer measures graceful handovers at the default
// settings (lease 15 s) between two processes behind PgBouncer in
// transaction mode. Notifications do not arrive there, so the follower
// must poll every maxPoll (2 s), not wait for the holder's expiry (a
// default poll interval of Lease, 15 s): each
// handover ends within 2 s of the follower's last attempt.
func TestHandoverThroughPgBouncer(t *testing.T) {
	t.Parallel()
	dsn := bouncer(t, "simple_protocol")
	const rounds = 5
	var took []time.Duration
	for i := range rounds {
		name := "bouncer-handover-" + randomHex()
		build := func() *leadership.Flag {
			f, err := leadership.NewFlag().Store(newStore(t, newPool(t, dsn))).Name(name).Migrate(false).Build(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.Close() })
			return f
		}
		leader := build()
		follower := build()
		if !leader.Raised() || follower.Raised() {
			t.Fatal("want the first flag leading")
		}
		// Close at a different point of the follower's poll each round.
		time.Sleep(time.Duration(i) * maxPoll / rounds)
		start := time.Now()
		if err := leader.Close(); err != nil {
			t.Fatal(err)
		}
		limit := maxPoll + time.Second
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		err := follower.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: no handover within %v (2 s + 1 s): the follower did not fall back to the short poll", i, limit)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("graceful handover through PgBouncer (transaction mode, lease 15 s, polling): min %v, median %v, max %v (n=%d)",
		took[0].Round(time.Millisecond), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), len(took))
}

// TestStatementCacheThroughPgBouncerNamesTheFix shows what pgx's default
// statement cache meets behind PgBouncer 1.18 in transaction mode, where
// server sessions (and their prepared statements) are shared: two
// processes on a one-connection pool prepare the same statement name on
// one session. The store's error must name the DSN setting that fixes it.
func TestStatementCacheThroughPgBouncerNamesTheFix(t *testing.T) {
	t.Parallel()
	dsn := singleServer(t, bouncer(t, ""))
	a, b := newStore(t, newPool(t, dsn)), newStore(t, newPool(t, dsn))
	name := "stmtcache-" + randomHex()
	var errs []error
	for _, s := range []*postgres.Store{a, b, a, b} {
		if _, err := s.Acquire(context.Background(), leadership.Request{Name: name, Holder: "x", Lease: time.Minute}); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		t.Fatal("the statement cache worked through PgBouncer 1.18 in transaction mode; expected a prepared statement error")
	}
	for _, err := range errs {
		if !strings.Contains(err.Error(), "default_query_exec_mode=simple_protocol") {
			t.Errorf("error without the fix: %v", err)
		}
	}
	t.Logf("through PgBouncer 1.18 with the statement cache: %v", errs[0])
}

// TestMigrateOncePerStore holds golang-migrate's advisory lock from
// another session, as a lock orphaned behind a pooler in transaction mode
// stays held, and checks that a store that has migrated once builds flags
// (with the default Migrate(true)) without waiting for it.
func TestMigrateOncePerStore(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	pool := newPool(t, dsn)
	s := newStore(t, pool)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	var database, schema string
	if err := pool.QueryRow(context.Background(), `SELECT current_database(), current_schema()`).Scan(&database, &schema); err != nil {
		t.Fatal(err)
	}
	key, err := mdatabase.GenerateAdvisoryLockId(database, schema, migrations.MigrationsTable)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	if _, err := holder.Exec(context.Background(), `SELECT pg_advisory_lock($1::bigint)`, key); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		f, err := leadership.NewFlag().Store(s).Name("once-" + randomHex()).Build(ctx)
		if err != nil {
			t.Fatalf("Build %d while the migration lock is held elsewhere: %v", i, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("3 Builds took %v while the migration lock was held elsewhere", took)
	}

	// What a store that has not migrated yet meets: golang-migrate waits
	// for the lock without heeding the caller's context, and the store
	// cuts that wait when the context ends.
	fresh := newStore(t, newPool(t, dsn))
	short, cancelShort := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancelShort()
	done := make(chan error, 1)
	go func() { done <- fresh.Migrate(short) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Migrate on a new store while the lock was held elsewhere = %v, want its context's end", err)
		}
	case <-time.After(10 * time.Second):
		if _, err := holder.Exec(context.Background(), `SELECT pg_advisory_unlock($1::bigint)`, key); err != nil {
			t.Error(err)
		}
		<-done
		t.Fatal("Migrate on a new store, given 0.5 s, still waited for the migration lock held elsewhere after 10 s")
	}
	if _, err := holder.Exec(context.Background(), `SELECT pg_advisory_unlock($1::bigint)`, key); err != nil {
		t.Fatal(err)
	}
	if err := fresh.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate on a new store, once the lock was free: %v", err)
	}
}
