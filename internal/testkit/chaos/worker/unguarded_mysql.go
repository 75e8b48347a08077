package main

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/mysql"
)

// THE UNGUARDED MUTANT for MySQL and MariaDB (see unguarded.go): the mysql
// store's statement-mode acquire as it was before the failover guard
// (mysql/statement.go, upsertTemplate and readRowQuery, and
// mysql/store.go, nowMicros, at commit 92ded33), copied verbatim. Do not
// update it when the store changes: it is the record of the mutant.
const (
	unguardedNowMicros      = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`
	unguardedUpsertTemplate = `
INSERT INTO leadership_flags (name, holder, version, renewed_at, expires_at)
VALUES (:name, :holder, LAST_INSERT_ID(1), :now, :now + :lease)
ON DUPLICATE KEY UPDATE
    renewed_at = IF(LAST_INSERT_ID(0) = 0 AND (expires_at <= :now
                    OR (:version > 0 AND holder = :holder AND version = :version)), :now, renewed_at),
    version = IF(expires_at <= :now OR (:version > 0 AND holder = :holder AND version = :version),
                 LAST_INSERT_ID(IF(:version > 0 AND holder = :holder AND version = :version, version, version + 1)),
                 version),
    holder = IF(expires_at <= :now OR (:version > 0 AND holder = :holder AND version = :version), :holder, holder),
    expires_at = IF(expires_at <= :now OR (:version > 0 AND holder = :holder AND version = :version),
                    :now + :lease, expires_at)`
	unguardedReadRowQuery = `SELECT LAST_INSERT_ID(), holder, version, renewed_at, expires_at, ` + unguardedNowMicros + `
FROM leadership_flags WHERE name = ?`
)

// unguardedUpsert is the template with a ? for each parameter, and the
// names of the parameters in their order.
var unguardedUpsert, unguardedParams = func() (string, []string) {
	var names []string
	q := regexp.MustCompile(`:(now|name|holder|version|lease)\b`).ReplaceAllStringFunc(unguardedUpsertTemplate, func(m string) string {
		if m == ":now" {
			return unguardedNowMicros
		}
		names = append(names, m[1:])
		return "?"
	})
	return q, names
}()

// unguardedMySQL is the mysql store (same table, same Release, Evict and
// Flags) with its Acquire replaced by the unguarded statements.
type unguardedMySQL struct {
	*mysql.Store
	db *sql.DB
}

// openUnguardedMySQL opens the mutant on a mysql:// DSN; the schema must
// exist.
func openUnguardedMySQL(dsn string) (leadership.Store, func(), error) {
	native, err := storeopen.MySQLNative(dsn)
	if err != nil {
		return nil, nil, err
	}
	db, err := sql.Open("mysql", native)
	if err != nil {
		return nil, nil, fmt.Errorf("mysql: %v", err)
	}
	s, err := mysql.New(db)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return &unguardedMySQL{Store: s, db: db}, func() { db.Close() }, nil
}

// Acquire is the mysql store's statement-mode Acquire (before the guard)
// without its retry: the upsert and the read of its outcome in one
// transaction, committed before the result is returned.
func (s *unguardedMySQL) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	if err := req.Validate(); err != nil {
		return leadership.Result{}, err
	}
	micros := (req.Lease + time.Microsecond - 1).Microseconds()
	args := make([]any, len(unguardedParams))
	for i, p := range unguardedParams {
		args[i] = map[string]any{"name": req.Name, "holder": req.Holder, "version": req.Version, "lease": micros}[p]
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return leadership.Result{}, fmt.Errorf("unguarded acquire: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit: a no-op
	if _, err := tx.ExecContext(ctx, unguardedUpsert, args...); err != nil {
		return leadership.Result{}, fmt.Errorf("unguarded acquire: %w", err)
	}
	res := leadership.Result{Record: leadership.Record{Name: req.Name}}
	var won, renewed, expires, now int64
	if err := tx.QueryRowContext(ctx, unguardedReadRowQuery, req.Name).Scan(
		&won, &res.Holder, &res.Version, &renewed, &expires, &now); err != nil {
		return leadership.Result{}, fmt.Errorf("unguarded acquire: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return leadership.Result{}, fmt.Errorf("unguarded acquire: %w", err)
	}
	res.Acquired = won > 0
	if res.Acquired {
		now = renewed
	}
	res.RenewedAt, res.ExpiresAt, res.Now = time.UnixMicro(renewed), time.UnixMicro(expires), time.UnixMicro(now)
	return res, nil
}
