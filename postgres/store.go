package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// acquireSQL decides and writes in one statement; see the package
// documentation, and docs/failover.md for the guard. $1 name, $2 holder, $3
// version held (0: none), $4 lease in microseconds.
//
// The CTEs, in order: the lease asked for (lease), which a hold lasts at
// least; then guardCTEs: the server's incarnation (inc_read, or inc_new when
// this statement is the first of a new incarnation; inc is NULL when
// another statement wrote it after this one began); the guard record as
// read (g_read) and as written when this statement noticed a new
// incarnation or a longer lease (g_write); the guard in force for this
// statement (guard: the written record, or the one read when it is
// current, or, when another statement is changing it concurrently, a hold
// of this statement's own from now, which only ends later); the upsert
// (up), which renews the requester's own term (while a hold is in force,
// only one that has not expired) and starts a new term only outside a hold,
// with a version at or above the floor; an expired own term begun under an
// earlier incarnation (its version is below the floor) is not renewed but
// replaced by a new term, since a lost later term may have raised a higher
// token meanwhile. A row at the largest version takes no new term (its
// version + 1 would fail the statement, and with it a whole batch): it
// loses, free, which the batcher reports as an error of its request alone
// (sqlstore.Exhausted). The last branches report a loss:
// the row with its expiry raised to the hold's end, or a name without a
// row, free but held.
const acquireSQL = `
WITH lease AS (
    SELECT $4::bigint AS us
), ` + guardCTEs + `, up AS (
    INSERT INTO leadership_flags AS f (name, holder, version, renewed_at, expires_at)
    SELECT $1, $2, greatest(1, g.version_floor), now(), now() + $4::bigint * interval '1 microsecond'
    FROM guard g
    WHERE now() >= g.hold_until OR EXISTS (SELECT FROM leadership_flags WHERE name = $1)
    ON CONFLICT (name) DO UPDATE SET
        version = CASE WHEN f.holder = excluded.holder AND f.version = $3::bigint
                            AND (f.expires_at > excluded.renewed_at OR f.version >= (SELECT version_floor FROM guard))
                       THEN f.version ELSE greatest(f.version + 1, (SELECT version_floor FROM guard)) END,
        holder = excluded.holder,
        renewed_at = excluded.renewed_at,
        expires_at = excluded.expires_at
    WHERE ($3::bigint > 0 AND f.holder = excluded.holder AND f.version = $3::bigint
           AND (f.expires_at > excluded.renewed_at OR excluded.renewed_at >= (SELECT hold_until FROM guard)))
       OR (f.expires_at <= excluded.renewed_at AND excluded.renewed_at >= (SELECT hold_until FROM guard)
           AND f.version < 9223372036854775807)
    RETURNING f.holder, f.version, f.renewed_at, f.expires_at
)
SELECT true, holder, version, renewed_at, expires_at, now() FROM up
UNION ALL
SELECT false, f.holder, f.version, f.renewed_at, greatest(f.expires_at, g.hold_until), now()
FROM leadership_flags f, guard g
WHERE f.name = $1 AND NOT EXISTS (SELECT FROM up)
UNION ALL
SELECT false, '', 0, now(), g.hold_until, now() FROM guard g
WHERE now() < g.hold_until AND NOT EXISTS (SELECT FROM up)
  AND NOT EXISTS (SELECT FROM leadership_flags WHERE name = $1)`

// guardCTEs are the CTEs of the failover guard that acquireSQL and
// acquireManySQL share: the server's incarnation (inc), the guard record
// as read (g_read) and as written (g_write), and the guard in force for
// the statement (guard). They read the lease of a hold from a CTE lease
// (one row, us) that the statement defines before them.
//
// g_read locks the record FOR KEY SHARE, which reads its latest committed
// version (not the statement's snapshot) and keeps it until the statement
// commits: a Quarantine, which locks it FOR UPDATE, waits for every acquire
// statement that has read it, even one that then waits for a flag's row
// lock, so no new term starts after Quarantine returned (a statement that
// locks after the quarantine reads its hold). KEY SHARE conflicts with
// FOR UPDATE only: acquire statements never wait for each other on it,
// nor for g_write's UPDATE (FOR NO KEY UPDATE), and a Quarantine waiting
// for them does not hold them up (PostgreSQL grants a lock that conflicts
// with no holder at once, ahead of waiters). g_write joins g_read so that
// the record is locked before it is updated, by one statement.
const guardCTEs = `inc_read AS (
    SELECT incarnation FROM leadership_incarnation WHERE id = 1
), inc_new AS (
    INSERT INTO leadership_incarnation (id, incarnation)
    SELECT 1, gen_random_uuid()::text WHERE NOT EXISTS (SELECT FROM inc_read)
    ON CONFLICT (id) DO NOTHING
    RETURNING incarnation
), inc AS (
    SELECT coalesce((SELECT incarnation FROM inc_read), (SELECT incarnation FROM inc_new)) AS id
), g_read AS (
    SELECT incarnation, hold_until, version_floor, max_lease_us FROM leadership_guard WHERE id = 1 FOR KEY SHARE
), g_write AS (
    UPDATE leadership_guard g SET
        incarnation = inc.id,
        hold_until = CASE WHEN g.incarnation IN ('', inc.id) THEN g.hold_until
            ELSE greatest(g.hold_until, now() + greatest(g.max_lease_us, l.us) * interval '1 microsecond') END,
        version_floor = CASE WHEN g.incarnation IN ('', inc.id) THEN g.version_floor
            ELSE greatest(g.version_floor, (extract(epoch FROM now()) * 1000000)::bigint) END,
        max_lease_us = greatest(g.max_lease_us, l.us)
    FROM inc, lease l, g_read
    WHERE g.id = 1 AND inc.id IS NOT NULL AND (g.incarnation <> inc.id OR g.max_lease_us < l.us)
    RETURNING g.hold_until, g.version_floor
), guard AS (
    SELECT
        CASE WHEN EXISTS (SELECT FROM g_write) THEN (SELECT hold_until FROM g_write)
             WHEN r.incarnation = '' OR r.incarnation = i.id THEN r.hold_until
             ELSE greatest(r.hold_until, now() + greatest(r.max_lease_us, l.us) * interval '1 microsecond')
        END AS hold_until,
        CASE WHEN EXISTS (SELECT FROM g_write) THEN (SELECT version_floor FROM g_write)
             WHEN r.incarnation = '' OR r.incarnation = i.id THEN r.version_floor
             ELSE greatest(r.version_floor, (extract(epoch FROM now()) * 1000000)::bigint)
        END AS version_floor
    FROM g_read r, inc i, lease l
)`

// Acquire implements [leadership.Store.Acquire]. Concurrent calls on one
// Store share round trips and commits (see batch.go).
func (s *Store) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	if err := req.Validate(); err != nil {
		return leadership.Result{}, err
	}
	return s.acquires.Do(ctx, req)
}

// Release implements [leadership.Store.Release]. The releases of flags
// of one Store that are due together travel in one statement (see
// batch.go). The flag was lowered before the call, so the release only
// hastens a follower, and it is committed asynchronously
// (synchronous_commit off for its own transaction; the session's setting
// is untouched): the NOTIFY, delivered at commit, does not wait for the
// WAL flush. A release lost in a crash of the server is a term that
// expires after its lease, as if the process had crashed; a follower's
// acquire, committed synchronously after the release, flushes the release
// with it.
func (s *Store) Release(ctx context.Context, name, holder string, version int64) (bool, error) {
	return sqlstore.DoRelease(ctx, s.releases, name, holder, version)
}

// releaseSQL ends the term ($2, $3) of the flag $1 if it holds the row,
// and notifies the release: a release alone.
const releaseSQL = `
WITH changed AS (
    UPDATE leadership_flags SET holder = '', expires_at = LEAST(expires_at, now())
    WHERE name = $1 AND holder = $2 AND holder <> '' AND version = $3
    RETURNING name
)
SELECT pg_notify('` + Channel + `', json_build_object('schema', current_schema(), 'name', name)::text)
FROM changed, set_config('synchronous_commit', 'off', true)`

// Evict implements [leadership.Store.Evict].
func (s *Store) Evict(ctx context.Context, name string) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	n, err := s.changeAndNotify(ctx, `
WITH changed AS (
    UPDATE leadership_flags SET holder = '' WHERE name = $1 AND holder <> '' RETURNING name
)
SELECT pg_notify('`+Channel+`', json_build_object('schema', current_schema(), 'name', name)::text) FROM changed`,
		name)
	if err != nil {
		return false, describe("evict "+sqlstore.Quote(name), err)
	}
	return n > 0, nil
}

// changeAndNotify runs an UPDATE that notifies each row it changed and
// returns how many rows it changed, retried once on a transient error.
// A process runs it about once per flag, so it is not prepared (see
// oneRoundTrip).
func (s *Store) changeAndNotify(ctx context.Context, sql string, args ...any) (int64, error) {
	var tag pgconn.CommandTag // SELECT n: one row per notified change
	err := sqlstore.RetryOnce(ctx, transient, func() error {
		return s.committed(ctx, func(conn *pgx.Conn) (err error) {
			tag, err = conn.Exec(ctx, sql, oneRoundTrip(conn, args)...)
			return err
		})
	})
	return tag.RowsAffected(), err
}

// oneRoundTrip returns args for a statement sent about once per flag: on
// a connection that caches statements (pgx's default) it is sent in the
// exec mode, parse, bind and execute in one round trip, instead of a
// round trip to prepare it first; otherwise in the mode the DSN chose
// (for a pooler).
func oneRoundTrip(conn *pgx.Conn, args []any) []any {
	switch conn.Config().DefaultQueryExecMode {
	case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe:
		return append([]any{pgx.QueryExecModeExec}, args...)
	}
	return args
}

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
		if readOnlyServer(err) {
			// The connection reaches a standby or a demoted primary (a
			// failover happened under the pool): close it, so that the
			// pool dials again (with target_session_attrs=read-write, the
			// primary) instead of handing it out again.
			_ = c.Conn().Close(context.WithoutCancel(ctx))
		}
		return err
	}
	if c.Conn().PgConn().TxStatus() != 'I' {
		return errInTransaction
	}
	return nil
}

// Flags implements [leadership.Store.Flags]. The clock and the rows are
// read by one statement, so from one snapshot, in one round trip, and no
// transaction of it waits on the client between statements (which an
// idle_in_transaction_session_timeout would end). A serialization failure
// (a session whose default isolation is SERIALIZABLE) is retried once. A
// row it cannot read (a time of 'infinity' written by another program, a
// NULL in a table whose NOT NULL was dropped by hand) is
// returned with its name only, and named in the error, a
// [sqlstore.UnreadableRows], with the other rows read as usual.
func (s *Store) Flags(ctx context.Context) ([]leadership.Record, time.Time, error) {
	var (
		out []leadership.Record
		now time.Time
		bad sqlstore.UnreadableRows
	)
	err := sqlstore.RetryOnce(ctx, transient, func() error {
		out, now, bad = nil, time.Time{}, nil
		// The clock's row joined to every flag: one row of NULLs when
		// there is no flag.
		rows, err := s.pool.Query(ctx, `
SELECT c.now, f.name, f.holder, f.version, f.renewed_at, f.expires_at
FROM (SELECT now()) AS c (now) LEFT JOIN leadership_flags f ON true
ORDER BY f.name COLLATE "C"`)
		if err != nil {
			return err
		}
		var (
			name, holder     *string
			version          *int64
			renewed, expires pgtype.Timestamptz // a failed Scan would end the rows: read infinity too
		)
		_, err = pgx.ForEachRow(rows, []any{&now, &name, &holder, &version, &renewed, &expires}, func() error {
			if name == nil {
				return nil
			}
			if err := unreadable(holder, version, renewed, expires); err != nil {
				bad = append(bad, sqlstore.UnreadableRow{Name: *name, Err: err})
				out = append(out, leadership.Record{Name: *name})
				return nil
			}
			out = append(out, leadership.Record{Name: *name, Holder: *holder, Version: *version, RenewedAt: renewed.Time, ExpiresAt: expires.Time})
			return nil
		})
		return err
	})
	if err != nil {
		return nil, time.Time{}, describe("list flags", err)
	}
	if err := bad.Err(); err != nil {
		return out, now, fmt.Errorf("postgres: list flags: %w", err)
	}
	return out, now, nil
}

// unreadable reports why Flags cannot read a row: a NULL (in a table
// whose NOT NULL was dropped by hand) or an infinite time; nil when it
// can.
func unreadable(holder *string, version *int64, renewed, expires pgtype.Timestamptz) error {
	if err := sqlstore.Nulls(holder != nil, version != nil, renewed.Valid, expires.Valid); err != nil {
		return err
	}
	if renewed.InfinityModifier != pgtype.Finite || expires.InfinityModifier != pgtype.Finite {
		return fmt.Errorf("renewed_at %s, expires_at %s: a time is infinite", renewed.InfinityModifier, expires.InfinityModifier)
	}
	return nil
}
