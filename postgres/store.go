package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

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
	err := sqlstore.RetryOnce(ctx, transient, func() error {
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
		return leadership.Result{}, describe("acquire "+sqlstore.Quote(req.Name), err)
	}
	return res, nil
}

// Release implements [leadership.Store.Release].
func (s *Store) Release(ctx context.Context, name, holder string, version int64) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	return s.changeAndNotify(ctx, "release "+sqlstore.Quote(name), `
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
	return s.changeAndNotify(ctx, "evict "+sqlstore.Quote(name), `
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
	err := sqlstore.RetryOnce(ctx, transient, func() error {
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
