// Package postgres is the [leadership.Store] for PostgreSQL 13+ on
// github.com/jackc/pgx/v5, for fleets that already share a Postgres
// database.
//
//	pool, err := postgres.Open(ctx, "postgres://app@db/app")
//	store, err := postgres.New(pool)
//	flag, err := leadership.NewFlag().Store(store).Name("nightly-report").Build(ctx)
//
// # Statements
//
// Acquire-or-renew is one statement and one round trip: an INSERT … ON
// CONFLICT (name) DO UPDATE … WHERE <held by this term> OR <expired>
// RETURNING, judged by the server's now(), which also reports who holds
// the flag when it loses. The attempts of flags of one Store that are due
// together are decided by one statement over arrays. pgxpool pings a
// connection idle for more than a second before it lends it, a second
// round trip: a pool of [Open] has [ShouldPing], which keeps an attempt at
// one; on a pool of your own, set it in the pool's config ([New] logs at
// Info when it is not set). [New] never closes the pool. The store
// implements the failover guard of the repository's docs/failover.md: the
// server's incarnation lives in the UNLOGGED table leadership_incarnation,
// which crash recovery and a promotion empty.
//
// # Schema and privileges
//
// The tables leadership_flags, leadership_guard, leadership_incarnation and
// golang-migrate's leadership_schema_migrations live in the connection's
// current schema (the first schema of search_path that exists), so a
// non-default schema is chosen with the pool's search_path, for example
// "postgres://app@db/app?search_path=jobs". [Store.Migrate] needs CREATE on
// that schema; when an administrator applied the migrations (see package
// migrations), the application role needs only SELECT, INSERT and UPDATE on
// leadership_flags, SELECT and INSERT on leadership_incarnation, SELECT and
// UPDATE on leadership_guard, and SELECT on leadership_schema_migrations.
// Migrate checks each and names the GRANT that is missing.
//
// # Notifications
//
// Release and Evict send, in the same statement, NOTIFY on the channel
// [Channel] with the JSON payload {"schema": …, "name": …}; the releases
// of flags of one Store that are due together (a process closing its
// flags) travel in one statement, which ends each term it names that
// still holds its row and notifies each (BENCHMARKS.md §7). Each Store keeps
// one LISTEN connection (taken out of the pool) for all the flags of the
// process, while any of them waits, and wakes the flags of the named flag
// at once: a graceful handover completes in milliseconds. The payload names
// the schema, so flag tables in several schemas never wake each other. If
// the listening connection breaks, the flags go on polling and the listener
// reconnects with backoff, waking every flag once when it is back.
//
// After each LISTEN the listener sends itself a notification through the
// pool, and the store reports its notifications available
// ([Store.NotifiesOtherProcesses]; followers then attempt once per lease,
// at the holder's expiry) only once it has arrived (it warns after
// [ProbeTimeout] without it). Until then flags on the default poll interval
// poll every 2 s. Behind a pooler in transaction mode (PgBouncer, RDS
// Proxy) a LISTEN receives nothing, so the listener never runs LISTEN when
// the server's backend pid differs from the one the connection announced;
// it logs a warning instead. [WithoutNotifications] turns listening off.
//
// # Poolers
//
// Through PgBouncer in transaction mode, set
// default_query_exec_mode=simple_protocol (or exec) in the DSN: pgx's
// default statement cache needs prepared statements that outlive a
// transaction (PgBouncer 1.21 or later with max_prepared_statements), and
// otherwise fails with an error that names this setting. Apply the
// migrations over a direct connection (golang-migrate's advisory lock is
// session-level) and build flags with Migrate(false). The repository's
// docs/stores.md and docs/operations.md say more.
package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/notify"
	"github.com/dbflag/leadership/internal/schema"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// Channel is the NOTIFY channel of releases and evictions.
const Channel = "leadership_release"

// Store is the PostgreSQL store. It is safe for concurrent use; create it
// with [New].
type Store struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	hub       notify.Hub
	noListen  bool        // WithoutNotifications
	delivered atomic.Bool // the listener's probe arrived on its current connection
	migrated  schema.Once
	acquires  *sqlstore.Acquires      // batch.go
	releases  *sqlstore.Releases      // batch.go
	ticks     leadership.RenewalTicks // batch.go
	// statementPerFlag sends a batch as one acquireSQL statement per
	// request (each a run of its own), as before acquireManySQL: a test
	// hook, for the benchmark that compares the two.
	statementPerFlag bool
}

var (
	_ leadership.Store           = (*Store)(nil)
	_ leadership.ProcessNotifier = (*Store)(nil)
	_ leadership.AcquireBatcher  = (*Store)(nil)
	_ leadership.SchemaVersioner = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithLogger sets where the listener logs its connection problems (Warn)
// and reconnections (Info), and where [New] says that its pool pings
// before each attempt (Info). Default: discard.
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.logger = l } }

// WithoutNotifications turns the LISTEN side of release notifications
// off: the store keeps no listening connection, and its flags poll at most
// every 2 s (by default), so a graceful
// handover takes up to one poll interval. Use it behind a pooler in
// transaction mode (PgBouncer pool_mode=transaction, RDS Proxy), where a
// LISTEN receives nothing; the store detects that by itself (see
// [Store.NotifiesOtherProcesses]), but would still hold a connection that
// listens in vain. Release and Evict still send their NOTIFY, for the
// listeners of processes connected directly.
func WithoutNotifications() Option { return func(s *Store) { s.noListen = true } }

// New returns a store on pool, a pool of [Open] or one of your own. It
// never closes the pool; close the pool after the flags that use the
// store. When the pool has pgxpool's default ShouldPing, which pings a
// connection idle for over a second before each attempt (a second round
// trip), New says so at Info on the logger of [WithLogger].
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: postgres.New: pool is nil", leadership.ErrInvalidArgument)
	}
	s := &Store{pool: pool}
	s.newBatchers()
	s.hub.Watch = s.listen // notify.go
	for _, o := range opts {
		o(s)
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if pool.Config().ShouldPing == nil {
		s.logger.InfoContext(context.Background(), "postgres: the pool pings a connection idle for over a second before lending it, so most attempts cost two round trips: open it with postgres.Open, or set its ShouldPing to postgres.ShouldPing")
	}
	return s, nil
}
