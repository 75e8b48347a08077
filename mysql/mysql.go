// Package mysql is the [leadership.Store] for MySQL 8.0+ and MariaDB 10.6+
// on github.com/go-sql-driver/mysql, for fleets whose shared database is
// MySQL.
//
//	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/app")
//	store, err := mysql.New(db)
//	flag, err := leadership.NewFlag().Store(store).Name("nightly-report").Build(ctx)
//
// # Statements and clock
//
// Acquire-or-renew is one round trip: CALL leadership_acquire(…), a stored
// procedure the migrations create, runs one INSERT … ON DUPLICATE KEY
// UPDATE whose assignments change the row only when it is held by the
// caller's term or expired, reports the outcome through LAST_INSERT_ID,
// commits, and returns the row, so a losing attempt learns who holds the
// flag and until when. MySQL has no INSERT … RETURNING and MariaDB has none for the update
// of an upsert, hence the procedure. The statement is right whether or not
// MariaDB's SIMULTANEOUS_ASSIGNMENT sql mode is on. The store prepares the
// CALL once and database/sql keeps it on each connection (one prepared
// statement per connection of db), so an attempt is one round trip without
// interpolateParams too.
//
// Instants are integer microseconds since the Unix epoch read from
// UTC_TIMESTAMP(6) inside the statement, which starts after the client
// sent it: the ordering the flag's trust window relies on.
//
// # DSN
//
// The store needs no DSN parameter: it reads no DATETIME column, so
// parseTime and loc do not matter, and UTC_TIMESTAMP makes the session
// time_zone irrelevant; clientFoundRows, interpolateParams and
// multiStatements do not matter either. The tests run it with several of
// these settings.
//
// # Autocommit
//
// Every statement that writes is committed before its reply is trusted,
// whatever the session's autocommit (autocommit=0 in the DSN, which the
// driver sends as SET autocommit=0; init_connect='SET autocommit=0'; a
// global autocommit=0). Without autocommit a write would stay in an open
// transaction on a pooled connection: a term the caller trusts could be
// rolled back when that connection closes, and another process would then
// get the same token, while the open transaction kept the row locked
// against everyone else. So the procedure runs its work in a transaction
// of its own and commits it before it sends the row (one round trip still,
// no check of @@autocommit needed), [Store.Release] and [Store.Evict] run
// their UPDATE in a transaction they commit, reads run in a read-only
// transaction (so they never see a snapshot an earlier statement left
// open), and [Store.Migrate] turns autocommit on for golang-migrate's
// connection and back off afterwards. The store runs only on connections of
// the pool, never inside a caller's transaction (database/sql lends no
// connection with an open transaction), but in a session without autocommit
// it commits whatever that session had left uncommitted. Acquire refuses a
// procedure older than schema version 4, which did not commit.
//
// # Schema and privileges
//
// The table leadership_flags, the procedure leadership_acquire and
// golang-migrate's version table leadership_schema_migrations live in the
// connection's database. [Store.Migrate] needs CREATE, ALTER ROUTINE and
// CREATE ROUTINE there; when an administrator applied the migrations, the
// application user needs SELECT, INSERT, UPDATE on leadership_flags,
// EXECUTE on the procedure and SELECT on leadership_schema_migrations. The
// procedure runs with the caller's privileges (SQL SECURITY INVOKER).
// Schema version 4 drops and re-creates the procedure (MySQL has no CREATE
// OR REPLACE PROCEDURE), which drops an EXECUTE granted on it by name:
// grant it again after migrating, or grant EXECUTE on the database.
//
// # Release notifications
//
// MySQL has no LISTEN/NOTIFY: flags of other processes learn of a release
// at their next poll. Flags of the same process on one Store are woken at
// once.
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/notify"
	"github.com/dbflag/leadership/internal/schema"
)

// Store is the MySQL/MariaDB store. It is safe for concurrent use; create
// it with [New].
type Store struct {
	db       *sql.DB
	hub      notify.Hub
	migrated schema.Once

	mu      sync.Mutex
	acquire *sql.Stmt // the CALL of Acquire, prepared at its first use
}

var (
	_ leadership.Store           = (*Store)(nil)
	_ leadership.ReleaseNotifier = (*Store)(nil)
)

// Option configures a Store. There are none yet; the parameter keeps New's
// signature stable.
type Option func(*Store)

// New returns a store on db, a database opened with the "mysql" driver of
// github.com/go-sql-driver/mysql. It never closes db. The schema is applied
// by [Store.Migrate], which [leadership.FlagBuilder.Build] calls by default.
func New(db *sql.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mysql.New: db is nil", leadership.ErrInvalidArgument)
	}
	s := &Store{db: db}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// nowMicros is the database clock in microseconds since the Unix epoch,
// independent of the session time zone.
const nowMicros = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`

// Acquire implements [leadership.Store.Acquire].
func (s *Store) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	if err := req.Validate(); err != nil {
		return leadership.Result{}, err
	}
	micros := (req.Lease + time.Microsecond - 1).Microseconds() // round up: never shorter than asked
	stmt, err := s.acquireStmt(ctx)
	if err != nil {
		return leadership.Result{}, describe("acquire "+quote(req.Name), err)
	}
	var res leadership.Result
	err = retryTransient(ctx, func() error {
		res = leadership.Result{Record: leadership.Record{Name: req.Name}}
		rows, err := stmt.QueryContext(ctx, req.Name, req.Holder, req.Version, micros)
		if err != nil {
			return err
		}
		return scanAcquired(rows, &res)
	})
	if err != nil {
		return leadership.Result{}, describe("acquire "+quote(req.Name), err)
	}
	return res, nil
}

// errUncommittingProcedure is returned by Acquire when the database has the
// procedure of schema version 2, which did not commit its upsert in a
// session without autocommit.
var errUncommittingProcedure = errors.New("the procedure leadership_acquire is older than schema version 4 and does not commit in sessions without autocommit: apply the migrations (Build does unless Migrate(false); or leadership migrate)")

// scanAcquired reads the row the procedure returns into res, and closes
// rows. The reply is trusted only once it has been read to its end (the
// driver reads the procedure's final status in Close, whose error it
// returns), and only from the procedure of migration 0004, recognised by
// the name of its first column, acquired (schema 2 named it TRUE or FALSE).
func scanAcquired(rows *sql.Rows, res *leadership.Result) error {
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	if len(cols) == 0 || cols[0] != "acquired" {
		return errUncommittingProcedure
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	var renewed, expires, now int64
	if err := rows.Scan(&res.Acquired, &res.Holder, &res.Version, &renewed, &expires, &now); err != nil {
		return err
	}
	res.RenewedAt, res.ExpiresAt, res.Now = time.UnixMicro(renewed), time.UnixMicro(expires), time.UnixMicro(now)
	return rows.Close()
}

// acquireStmt returns the CALL of Acquire, prepared once for the store.
// database/sql then prepares it once per connection and reuses it, so an
// attempt is one round trip whatever the DSN says; a query with arguments
// would otherwise be prepared, executed and closed at every attempt unless
// the DSN sets interpolateParams. A failed preparation is retried at the
// next attempt.
func (s *Store) acquireStmt(ctx context.Context) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.acquire == nil {
		stmt, err := s.db.PrepareContext(ctx, `CALL leadership_acquire(?, ?, ?, ?)`)
		if err != nil {
			return nil, err
		}
		s.acquire = stmt
	}
	return s.acquire, nil
}

// Release implements [leadership.Store.Release].
func (s *Store) Release(ctx context.Context, name, holder string, version int64) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	// holder always changes, so "rows affected" means the same with and
	// without clientFoundRows.
	return s.change(ctx, "release "+quote(name), name, `
UPDATE leadership_flags SET holder = '', expires_at = LEAST(expires_at, `+nowMicros+`)
WHERE name = ? AND holder = ? AND holder <> '' AND version = ?`, name, holder, version)
}

// Evict implements [leadership.Store.Evict].
func (s *Store) Evict(ctx context.Context, name string) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	return s.change(ctx, "evict "+quote(name), name,
		`UPDATE leadership_flags SET holder = '' WHERE name = ? AND holder <> ''`, name)
}

// change runs an UPDATE of the row of name in a transaction it commits
// (see Autocommit in the package documentation), reports whether it
// changed the row and, if so, wakes this process's flags waiting for name.
func (s *Store) change(ctx context.Context, what, name, query string, args ...any) (bool, error) {
	var n int64
	err := retryTransient(ctx, func() error {
		return s.inTx(ctx, false, func(tx *sql.Tx) error {
			r, err := tx.ExecContext(ctx, query, args...)
			if err != nil {
				return err
			}
			n, err = r.RowsAffected()
			return err
		})
	})
	if err != nil {
		return false, describe(what, err)
	}
	if n > 0 {
		s.hub.Notify(name)
	}
	return n > 0, nil
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
// the clock are read at one instant.
func (s *Store) Flags(ctx context.Context) ([]leadership.Record, time.Time, error) {
	var (
		out []leadership.Record
		now int64
	)
	err := s.inTx(ctx, true, func(tx *sql.Tx) error {
		out = nil
		rows, err := tx.QueryContext(ctx, `
SELECT c.now, f.name, f.holder, f.version, f.renewed_at, f.expires_at
FROM (SELECT `+nowMicros+` AS now) c LEFT JOIN leadership_flags f ON TRUE
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
				return err
			}
			if !name.Valid {
				continue // no flags: the clock's row alone
			}
			out = append(out, leadership.Record{Name: name.String, Holder: holder.String, Version: version.Int64,
				RenewedAt: time.UnixMicro(renewed.Int64), ExpiresAt: time.UnixMicro(expires.Int64)})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, time.Time{}, describe("list flags", err)
	}
	return out, time.UnixMicro(now), nil
}

// NotifyReleases implements [leadership.ReleaseNotifier] for flags on this
// store (this process only).
func (s *Store) NotifyReleases(name string) (<-chan struct{}, func()) {
	return s.hub.Subscribe(name)
}

func quote(name string) string { return fmt.Sprintf("%q", name) }
