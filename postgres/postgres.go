// Package postgres is the [leadership.Store] for PostgreSQL on
// github.com/jackc/pgx/v5, for fleets that already share a Postgres
// database.
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db/app")
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
// # Schema
//
// The table leadership_flags and golang-migrate's version table
// leadership_schema_migrations live in the connection's current schema
// (the first schema of search_path that exists), so a non-default schema is
// chosen with the pool's search_path, for example
// "postgres://app@db/app?search_path=jobs". [Store.Migrate] needs CREATE on
// that schema; when an administrator applied the migrations (see package
// migrations), the application role needs only SELECT, INSERT and UPDATE on
// leadership_flags and SELECT on leadership_schema_migrations.
//
// # Notifications
//
// Release and Evict send, in the same statement, NOTIFY on the channel
// [Channel] with the JSON payload {"schema": …, "name": …}. Each Store keeps
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
// of Lease/3. [WithoutNotifications] turns listening off.
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
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/notify"
	"github.com/dbflag/leadership/internal/schema"
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

	mu     sync.Mutex
	subs   int                // subscriptions to NotifyReleases
	stop   context.CancelFunc // stops the listener started last
	exited chan struct{}      // closed when the listener has exited
}

var (
	_ leadership.Store           = (*Store)(nil)
	_ leadership.ReleaseNotifier = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithLogger sets where the listener logs its connection problems (Warn)
// and reconnections (Info). Default: discard.
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

// New returns a store on pool. It never closes the pool; close the pool
// after the flags that use the store.
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: postgres.New: pool is nil", leadership.ErrInvalidArgument)
	}
	s := &Store{pool: pool}
	for _, o := range opts {
		o(s)
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// acquireSQL decides and writes in one statement; see the package
// documentation. $1 name, $2 holder, $3 version held (0: none), $4 lease in
// microseconds.
const acquireSQL = `
WITH up AS (
    INSERT INTO leadership_flags AS f (name, holder, version, renewed_at, expires_at)
    VALUES ($1, $2, 1, now(), now() + $4::bigint * interval '1 microsecond')
    ON CONFLICT (name) DO UPDATE SET
        version = CASE WHEN f.holder = excluded.holder AND f.version = $3::bigint
                       THEN f.version ELSE f.version + 1 END,
        holder = excluded.holder,
        renewed_at = excluded.renewed_at,
        expires_at = excluded.expires_at
    WHERE ($3::bigint > 0 AND f.holder = excluded.holder AND f.version = $3::bigint)
       OR f.expires_at <= excluded.renewed_at
    RETURNING f.holder, f.version, f.renewed_at, f.expires_at
)
SELECT true, holder, version, renewed_at, expires_at, now() FROM up
UNION ALL
SELECT false, holder, version, renewed_at, expires_at, now() FROM leadership_flags
WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM up)`

// Acquire implements [leadership.Store.Acquire].
func (s *Store) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	if err := req.Validate(); err != nil {
		return leadership.Result{}, err
	}
	micros := (req.Lease + time.Microsecond - 1).Microseconds() // round up: never shorter than asked
	var res leadership.Result
	err := retryTransient(ctx, func() error {
		return s.committed(ctx, func(conn *pgx.Conn) error {
			res = leadership.Result{Record: leadership.Record{Name: req.Name}}
			err := conn.QueryRow(ctx, acquireSQL, req.Name, req.Holder, req.Version, micros).
				Scan(&res.Acquired, &res.Holder, &res.Version, &res.RenewedAt, &res.ExpiresAt, &res.Now)
			if errors.Is(err, pgx.ErrNoRows) {
				// The row was inserted by a concurrent statement after ours
				// began: we lost, and its content is not visible to us yet.
				// Zero instants make the follower retry soon.
				return nil
			}
			return err
		})
	})
	if err != nil {
		return leadership.Result{}, describe("acquire "+quote(req.Name), err)
	}
	return res, nil
}

// Release implements [leadership.Store.Release].
func (s *Store) Release(ctx context.Context, name, holder string, version int64) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	return s.changeAndNotify(ctx, "release "+quote(name), `
WITH changed AS (
    UPDATE leadership_flags SET holder = '', expires_at = LEAST(expires_at, now())
    WHERE name = $1 AND holder = $2 AND holder <> '' AND version = $3
    RETURNING name
)
SELECT pg_notify('`+Channel+`', json_build_object('schema', current_schema(), 'name', name)::text) FROM changed`,
		name, holder, version)
}

// Evict implements [leadership.Store.Evict].
func (s *Store) Evict(ctx context.Context, name string) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	return s.changeAndNotify(ctx, "evict "+quote(name), `
WITH changed AS (
    UPDATE leadership_flags SET holder = '' WHERE name = $1 AND holder <> '' RETURNING name
)
SELECT pg_notify('`+Channel+`', json_build_object('schema', current_schema(), 'name', name)::text) FROM changed`,
		name)
}

// changeAndNotify runs an UPDATE that notifies each row it changed and
// reports whether it changed one.
func (s *Store) changeAndNotify(ctx context.Context, what, sql string, args ...any) (bool, error) {
	var tag pgconn.CommandTag // SELECT n: one row per notified change
	err := retryTransient(ctx, func() error {
		return s.committed(ctx, func(conn *pgx.Conn) (err error) {
			tag, err = conn.Exec(ctx, sql, args...)
			return err
		})
	})
	if err != nil {
		return false, describe(what, err)
	}
	return tag.RowsAffected() > 0, nil
}

// errInTransaction is returned when a statement of the store ran inside a
// transaction the session had open before it.
var errInTransaction = errors.New("the session was inside a transaction, so the statement was not committed and will be rolled back: the store needs sessions outside any transaction (does a pgx AfterConnect or PrepareConn hook run BEGIN?)")

// committed runs fn, one statement, on a connection of the pool, and fails
// unless the session is outside any transaction afterwards. A statement
// sent outside a transaction block has committed by the time the server
// reports the session idle ('I' in ReadyForQuery), so this is what lets the
// caller trust a write, at no cost: the status comes with the reply. A
// session already inside a transaction (a hook of the pool that runs
// BEGIN) would leave the write uncommitted, and pgxpool destroys a
// connection released inside a transaction, rolling the write back after
// the caller trusted it.
func (s *Store) committed(ctx context.Context, fn func(*pgx.Conn) error) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	if err := fn(c.Conn()); err != nil {
		return err
	}
	if c.Conn().PgConn().TxStatus() != 'I' {
		return errInTransaction
	}
	return nil
}

// Flags implements [leadership.Store.Flags].
func (s *Store) Flags(ctx context.Context) ([]leadership.Record, time.Time, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return nil, time.Time{}, describe("list flags", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, time.Time{}, describe("read clock", err)
	}
	rows, err := tx.Query(ctx, `SELECT name, holder, version, renewed_at, expires_at FROM leadership_flags ORDER BY name COLLATE "C"`)
	if err != nil {
		return nil, time.Time{}, describe("list flags", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (leadership.Record, error) {
		var rec leadership.Record
		err := r.Scan(&rec.Name, &rec.Holder, &rec.Version, &rec.RenewedAt, &rec.ExpiresAt)
		return rec, err
	})
	if err != nil {
		return nil, time.Time{}, describe("list flags", err)
	}
	return out, now, nil
}

func quote(name string) string { return fmt.Sprintf("%q", name) }
