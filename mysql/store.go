package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// nowMicros is the database clock in microseconds since the Unix epoch,
// independent of the session time zone.
const nowMicros = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`

// Acquire implements [leadership.Store.Acquire]. Concurrent calls on one
// Store share round trips and commits (see batch.go). In routine mode, it
// fails until the store has seen the schema at the version its procedures
// need (see checkSchema).
func (s *Store) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	if err := req.Validate(); err != nil {
		return leadership.Result{}, err
	}
	if err := s.checkSchema(ctx); err != nil {
		return leadership.Result{}, err
	}
	res, err := s.acquires.Do(ctx, req)
	if err == nil {
		s.observe(req, res)
	}
	return res, err
}

// acquireCall is one CALL of leadership_acquire, retried once on a
// transient error.
func (s *Store) acquireCall(ctx context.Context, req leadership.Request, res *leadership.Result) error {
	stmt, err := s.prepare(ctx, &s.acquireStmt, `CALL leadership_acquire(?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	return sqlstore.RetryOnce(ctx, transient, func() error {
		*res = leadership.Result{Record: leadership.Record{Name: req.Name}}
		rows, err := stmt.QueryContext(ctx, req.Name, req.Holder, req.Version, leaseMicros(req))
		if err != nil {
			return err
		}
		return scanAcquired(rows, res)
	})
}

// scanAcquired reads the row the procedure returns into res, and closes
// rows. The reply is trusted only once it has been read to its end (the
// driver reads the procedure's final status in Close, whose error it
// returns), and only from the procedure of migration 0009, recognised by
// its columns: the first is named acquired (schema 2 named it TRUE or
// FALSE) and the seventh hold_until (schema 4's had six, without the
// failover guard).
func scanAcquired(rows *sql.Rows, res *leadership.Result) error {
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	if len(cols) == 0 || cols[0] != "acquired" {
		return errUncommittingProcedure
	}
	if len(cols) != 7 || cols[6] != "hold_until" {
		return errUnguardedProcedure
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	var renewed, expires, now, hold int64
	if err := rows.Scan(&res.Acquired, &res.Holder, &res.Version, &renewed, &expires, &now, &hold); err != nil {
		return err
	}
	res.RenewedAt, res.ExpiresAt, res.Now = time.UnixMicro(renewed), time.UnixMicro(expires), time.UnixMicro(now)
	return rows.Close()
}

// prepare returns the statement *stmt, prepared from query at its first
// use and kept for the store. database/sql then prepares it once per
// connection and reuses it, so an attempt is one round trip whatever the
// DSN says; a query with arguments would otherwise be prepared, executed
// and closed at every attempt unless the DSN sets interpolateParams. A
// failed preparation is tried again at the next use.
func (s *Store) prepare(ctx context.Context, stmt **sql.Stmt, query string) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if *stmt == nil {
		prepared, err := s.db.PrepareContext(ctx, query)
		if err != nil {
			return nil, err
		}
		*stmt = prepared
	}
	return *stmt, nil
}

// Release implements [leadership.Store.Release]. The releases of flags
// of one Store that are due together share a transaction (see batch.go).
func (s *Store) Release(ctx context.Context, name, holder string, version int64) (bool, error) {
	return sqlstore.DoRelease(ctx, s.releases, name, holder, version)
}

// Evict implements [leadership.Store.Evict].
func (s *Store) Evict(ctx context.Context, name string) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	changed, err := s.change(ctx, `UPDATE leadership_flags SET holder = '' WHERE name = ? AND holder <> ''`, name)
	if err != nil {
		return false, describe("evict "+sqlstore.Quote(name), err)
	}
	if changed {
		s.hub.Notify(name)
	}
	return changed, nil
}

// change runs an UPDATE of one row in a transaction it commits (see
// Autocommit in the package documentation), retried once on a transient
// error, and reports whether it changed the row.
func (s *Store) change(ctx context.Context, query string, args ...any) (bool, error) {
	var n int64
	err := sqlstore.RetryOnce(ctx, transient, func() error {
		return s.inTx(ctx, false, func(tx *sql.Tx) error {
			r, err := tx.ExecContext(ctx, query, args...)
			if err != nil {
				return err
			}
			n, err = r.RowsAffected()
			return err
		})
	})
	return n > 0, err
}

// inTx runs fn in a transaction of its own and commits it. START
// TRANSACTION begins a transaction whatever the session's autocommit, and
// ends (commits) any the session had left open, so a read sees a fresh
// snapshot and a write is committed before the caller trusts it.
func (s *Store) inTx(ctx context.Context, readOnly bool, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: readOnly})
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Flags implements [leadership.Store.Flags]: one statement, so the rows and
// the clock are read at one instant. A row it cannot read (in a table
// changed by hand: text in a time column, a NULL in a column whose NOT
// NULL was dropped) is returned with its name only, and named in the
// error, a [sqlstore.UnreadableRows], with the other rows read as usual.
func (s *Store) Flags(ctx context.Context) ([]leadership.Record, time.Time, error) {
	var (
		out []leadership.Record
		bad sqlstore.UnreadableRows
		now int64
	)
	err := s.inTx(ctx, true, func(tx *sql.Tx) error {
		out, bad = nil, nil
		rows, err := tx.QueryContext(ctx, `
SELECT c.clock, f.name, f.holder, f.version, f.renewed_at, f.expires_at
FROM (SELECT `+nowMicros+` AS clock) c LEFT JOIN leadership_flags f ON TRUE
ORDER BY f.name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				name, holder              sql.NullString
				version, renewed, expires sql.NullInt64
			)
			if err := rows.Scan(&now, &name, &holder, &version, &renewed, &expires); err != nil {
				var skip any
				if rows.Scan(&now, &name, &skip, &skip, &skip, &skip) != nil || !name.Valid {
					return err
				}
				bad = append(bad, sqlstore.UnreadableRow{Name: name.String, Err: err})
				out = append(out, leadership.Record{Name: name.String})
				continue
			}
			if !name.Valid {
				continue // no flags: the clock's row alone
			}
			if err := sqlstore.Nulls(holder.Valid, version.Valid, renewed.Valid, expires.Valid); err != nil {
				bad = append(bad, sqlstore.UnreadableRow{Name: name.String, Err: err})
				out = append(out, leadership.Record{Name: name.String})
				continue
			}
			out = append(out, leadership.Record{Name: name.String, Holder: holder.String, Version: version.Int64,
				RenewedAt: time.UnixMicro(renewed.Int64), ExpiresAt: time.UnixMicro(expires.Int64)})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, time.Time{}, describe("list flags", err)
	}
	if err := bad.Err(); err != nil {
		return out, time.UnixMicro(now), fmt.Errorf("mysql: list flags: %w", err)
	}
	return out, time.UnixMicro(now), nil
}
