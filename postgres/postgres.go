// Package postgres is the [leadership.Store] for PostgreSQL on
// github.com/jackc/pgx/v5, for fleets that already share a Postgres
// database.
//
//	pool, err := postgres.Open(ctx, "postgres://app@db/app")
//	store, err := postgres.New(pool)
//	flag, err := leadership.NewFlag().Store(store).Name("nightly-report").Build(ctx)
//
// # Statements and clock
//
// Acquire-or-renew is one statement and one round trip: an INSERT … ON
// CONFLICT (name) DO UPDATE … WHERE <held by this term> OR <expired>
// RETURNING, in a CTE whose other branch reads the row as it stood when the
// statement began, so a losing attempt still learns who holds the flag and
// until when. Instants are the database's now(): the start of the
// statement's own transaction, which begins after the client sent it — the
// ordering the flag's trust window relies on — and is the same instant
// everywhere in the statement.
//
// pgxpool pings a connection idle for more than a second before it lends
// it, and an attempt's connection nearly always is (a holder renews every
// Lease/3): on a pool of pgxpool.New an attempt is two round trips. A pool
// of [Open] has [ShouldPing], which keeps it at one; on a pool of your own,
// set it in the pool's config ([New] logs at Info when it is not set).
//
// # Schema
//
// The table leadership_flags and golang-migrate's version table
// leadership_schema_migrations live in the connection's current schema
// (the first schema of search_path that exists), so a non-default schema is
// chosen with the pool's search_path, for example
// "postgres://app@db/app?search_path=jobs". [Store.Migrate] needs CREATE on
// that schema; when an administrator applied the migrations (see package
// migrations), the application role needs only SELECT, INSERT and UPDATE on
// leadership_flags, SELECT and INSERT on leadership_incarnation, SELECT and
// UPDATE on leadership_guard, and SELECT on leadership_schema_migrations.
//
// # Notifications
//
// Release and Evict send, in the same statement, NOTIFY on the channel
// [Channel] with the JSON payload {"schema": …, "name": …}; the releases
// of flags of one Store that are due together (a process closing its
// flags) travel in one statement, which ends each term it names that
// still holds its row and notifies each (BENCHMARKS.md §7). Each Store keeps
// one LISTEN connection (taken out of the pool) for all the flags of the
// process, from the first flag that waits until the last one closes, and
// wakes the flags of the named flag at once: a graceful handover completes
// in milliseconds. Notifications are per database, and the payload names
// the schema, so several flag tables (schemas) and databases on one server
// never wake each other's flags wrongly. If the listening connection
// breaks, the flags go on polling and the listener reconnects with backoff,
// waking every flag once when it is back in case a release was missed.
//
// Behind a pooler in transaction mode (PgBouncer, RDS Proxy) a LISTEN
// receives nothing and stays on a server session other clients use, so the
// listener never runs LISTEN when the server's backend pid differs from the
// one the connection announced (a pooler multiplexes sessions); it logs a
// warning instead. Otherwise, after each LISTEN it sends itself a
// notification through the pool, and the store reports its notifications
// available ([Store.NotifiesOtherProcesses]) only once that notification
// has arrived (it warns after [ProbeTimeout] without it). While they are
// unavailable, flags on the default poll interval poll every 2 s instead
// of waiting for the holder's expiry (at most Lease). [WithoutNotifications] turns listening off.
//
// # Poolers
//
// Through PgBouncer in transaction mode, set
// default_query_exec_mode=simple_protocol (or exec) in the DSN: pgx's
// default statement cache needs prepared statements that outlive a
// transaction (PgBouncer 1.21 or later with max_prepared_statements), and
// otherwise fails with an error that names this setting. Apply the
// migrations over a direct connection (golang-migrate's advisory lock is
// session-level) and build flags with Migrate(false).
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
	acquires  *sqlstore.Acquires // batch.go
	releases  *sqlstore.Releases // batch.go
	// statementPerFlag sends a batch as one acquireSQL statement per
	// request (each a run of its own), as before acquireManySQL: a test
	// hook, for the benchmark that compares the two.
	statementPerFlag bool
}

var (
	_ leadership.Store           = (*Store)(nil)
	_ leadership.ReleaseNotifier = (*Store)(nil)
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
