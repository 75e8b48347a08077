package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// Acquire implements [leadership.Store.Acquire]. Concurrent calls on one
// Store share a transaction (see batch.go).
func (s *Store) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	if err := req.Validate(); err != nil {
		return leadership.Result{}, err
	}
	return s.acquires.Do(ctx, req)
}

// acquireOn runs the acquire statement of req on conn, and the read of
// the row when it lost, in the connection's transaction or, outside one,
// each on its own.
func (s *Store) acquireOn(ctx context.Context, conn *sql.Conn, req leadership.Request) (leadership.Result, error) {
	leaseMillis := (req.Lease + time.Millisecond - 1).Milliseconds() // round up: never shorter than asked
	var version, wall, renewed, expires int64
	// A row is free when its term has expired by the host clock of this
	// boot, when an earlier boot wrote it, or, when an older version of
	// this package wrote it (host_boot ''), when it has expired by the wall
	// clock, as that version judges it. A row at the largest version takes
	// no new term (version + 1 would turn into a REAL): it loses, free,
	// which the batcher reports as an error of its request alone
	// (sqlstore.Exhausted).
	err := conn.QueryRowContext(ctx, clockCTE(5)+`
INSERT INTO leadership_flags (`+columns+`)
SELECT ?1, ?2, 1, c.wall, c.wall + ?4, ?6, c.host, c.host + ?4, 1 FROM c WHERE true
ON CONFLICT (name) DO UPDATE SET
    version = CASE WHEN leadership_flags.holder = excluded.holder AND leadership_flags.version = ?3
                   THEN leadership_flags.version ELSE leadership_flags.version + 1 END,
    holder = excluded.holder,
    renewed_at = excluded.renewed_at,
    expires_at = excluded.expires_at,
    host_boot = excluded.host_boot,
    host_renewed_at = excluded.host_renewed_at,
    host_expires_at = excluded.host_expires_at,
    host_writes = leadership_flags.host_writes + 1
WHERE (?3 > 0 AND leadership_flags.holder = excluded.holder AND leadership_flags.version = ?3)
   OR (CASE leadership_flags.host_boot
           WHEN excluded.host_boot THEN leadership_flags.host_expires_at <= excluded.host_renewed_at
           WHEN '' THEN leadership_flags.expires_at <= excluded.renewed_at
           ELSE 1
       END AND leadership_flags.version < 9223372036854775807)
RETURNING version, renewed_at, host_renewed_at, host_expires_at`,
		req.Name, req.Holder, req.Version, leaseMillis, s.tb.key, s.tb.boot).Scan(&version, &wall, &renewed, &expires)
	switch {
	case err == nil:
		s.tb.observe(instant{host: renewed, wall: wall})
		return leadership.Result{
			Record: leadership.Record{
				Name: req.Name, Holder: req.Holder, Version: version,
				RenewedAt: s.tb.at(renewed), ExpiresAt: s.tb.at(expires),
			},
			Acquired: true,
			Now:      s.tb.at(renewed),
		}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return leadership.Result{}, err
	}
	var r row
	var now instant
	err = conn.QueryRowContext(ctx, clockCTE(2)+`
SELECT holder, version, renewed_at, expires_at, host_boot, host_renewed_at, host_expires_at, c.host, c.wall
FROM leadership_flags, c WHERE name = ?1`, req.Name, s.tb.key).Scan(
		&r.holder, &r.version, &r.renewed, &r.expiry, &r.boot, &r.hostRenewed, &r.hostExpiry, &now.host, &now.wall)
	if err != nil {
		return leadership.Result{}, fmt.Errorf("read the row after losing: %w", err)
	}
	s.tb.observe(now)
	return leadership.Result{Record: s.tb.record(req.Name, r, now), Now: s.tb.at(now.host)}, nil
}

// Release implements [leadership.Store.Release]. The releases of flags
// of one Store that are due together share a transaction (see batch.go).
func (s *Store) Release(ctx context.Context, name, holder string, version int64) (bool, error) {
	return sqlstore.DoRelease(ctx, s.releases, name, holder, version)
}

// releaseOn ends the term of r on conn if it holds the row, and reports
// whether it did: in the connection's transaction or, outside one, on its
// own.
func (s *Store) releaseOn(ctx context.Context, conn *sql.Conn, r sqlstore.Release) (bool, error) {
	res, err := conn.ExecContext(ctx, clockCTE(4)+`UPDATE leadership_flags
SET holder = '', expires_at = MIN(expires_at, c.wall), host_expires_at = MIN(host_expires_at, c.host),
    host_writes = host_writes + 1
FROM c WHERE name = ?1 AND holder = ?2 AND holder <> '' AND version = ?3`, r.Name, r.Holder, r.Version, s.tb.key)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// Evict implements [leadership.Store.Evict].
func (s *Store) Evict(ctx context.Context, name string) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	conn, err := s.conn(ctx, "evict", name)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	r, err := conn.ExecContext(ctx, `UPDATE leadership_flags SET holder = '', host_writes = host_writes + 1
WHERE name = ? AND holder <> ''`, name)
	if err != nil {
		return false, fmt.Errorf("sqlite: evict %q: %w", name, err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: evict %q: rows affected: %w", name, err)
	}
	if n > 0 {
		announceRelease(s.filePath(ctx, conn.Conn)) // notify.go
		s.hub.Notify(name)
	}
	return n > 0, nil
}

// conn returns a connection of the store's pool for one write of the flag
// name, checked to be outside a transaction, so that the write's single
// statement commits on its own before its result is trusted. On a
// connection already inside a transaction (one a connection hook or a DSN
// pragma opened, or a stray db.Exec("BEGIN") on a one-connection pool) the
// statement would join that transaction and stay uncommitted, to be rolled
// back after the caller trusted it. The check is a deferred BEGIN, which
// SQLite refuses inside a transaction, and its COMMIT: neither takes a lock
// nor writes, so the write lock is held only by the write itself.
// Its wait for the write lock ends with ctx (see busy.go).
func (s *Store) conn(ctx context.Context, what, name string) (writeConn, error) {
	conn, err := s.outsideTx(ctx)
	if err != nil {
		return writeConn{}, fmt.Errorf("sqlite: %s %q: %w", what, name, err)
	}
	return conn, nil
}

// writeConn is a connection returned by conn: Close sets its busy timeout
// back, then returns it to the pool.
type writeConn struct {
	*sql.Conn
	restore func() // nil: nothing to set back
}

func (c writeConn) Close() error {
	if c.restore != nil {
		c.restore()
	}
	return c.Conn.Close()
}

// outsideTx is conn without the description of the write.
func (s *Store) outsideTx(ctx context.Context) (writeConn, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return writeConn{}, err
	}
	if _, err = conn.ExecContext(ctx, "BEGIN DEFERRED"); err == nil {
		_, err = conn.ExecContext(ctx, "COMMIT")
	}
	var restore func()
	if err == nil {
		restore, err = boundBusyWait(ctx, conn)
	}
	if err != nil {
		if !inTransaction(err) {
			rollback(conn) // a BEGIN or COMMIT that reports its context's end may have begun, or not committed
		}
		conn.Close()
		if inTransaction(err) {
			return writeConn{}, fmt.Errorf("the connection is already inside a transaction, so the write would not commit; "+
				"give the store a *sql.DB whose connections start outside a transaction (no BEGIN in a connection hook or DSN): %w", err)
		}
		return writeConn{}, fmt.Errorf("check the connection is outside a transaction, and bound its busy wait: %w", err)
	}
	return writeConn{conn, restore}, nil
}

// Flags implements [leadership.Store.Flags]. A row it cannot read (text
// in an integer column, written by another program) is returned with its
// name only, and named in the error, a [sqlstore.UnreadableRows], with the
// other rows read as usual.
func (s *Store) Flags(ctx context.Context) ([]leadership.Record, time.Time, error) {
	var now instant
	if err := s.db.QueryRowContext(ctx, clockCTE(1)+`SELECT host, wall FROM c`, s.tb.key).Scan(&now.host, &now.wall); err != nil {
		return nil, time.Time{}, fmt.Errorf("sqlite: read clock: %w", err)
	}
	s.tb.observe(now)
	rows, err := s.db.QueryContext(ctx, `SELECT name, holder, version, renewed_at, expires_at, host_boot, host_renewed_at, host_expires_at
FROM leadership_flags ORDER BY name`)
	if err != nil {
		return nil, time.Time{}, describe("list flags", err)
	}
	defer rows.Close()
	var out []leadership.Record
	var bad sqlstore.UnreadableRows
	for rows.Next() {
		var name string
		var r row
		if err := rows.Scan(&name, &r.holder, &r.version, &r.renewed, &r.expiry, &r.boot, &r.hostRenewed, &r.hostExpiry); err != nil {
			var skip any
			if rows.Scan(&name, &skip, &skip, &skip, &skip, &skip, &skip, &skip) != nil {
				return nil, time.Time{}, fmt.Errorf("sqlite: list flags: %w", err)
			}
			bad = append(bad, sqlstore.UnreadableRow{Name: name, Err: err})
			out = append(out, leadership.Record{Name: name})
			continue
		}
		out = append(out, s.tb.record(name, r, now))
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("sqlite: list flags: %w", err)
	}
	if err := bad.Err(); err != nil {
		return out, s.tb.at(now.host), fmt.Errorf("sqlite: list flags: %w", err)
	}
	return out, s.tb.at(now.host), nil
}
