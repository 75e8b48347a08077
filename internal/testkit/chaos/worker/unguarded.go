package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/postgres"
)

// THE UNGUARDED MUTANT. Not a store anyone should use: it exists so that
// the chaos suite's failover scenarios (internal/chaos, TestFailover…) can
// run once with the failover guard of docs/failover.md and once without
// it, and show that without it they find two leaders or one fencing token
// for two terms. A test that passes with the guard proves something only
// if it fails without it.
//
// unguardedAcquireSQL is the postgres store's acquire statement as it was
// before the guard (postgres/store.go, acquireSQL, at commit 92ded33),
// copied verbatim: it reads and writes leadership_flags only, so it knows
// nothing of database incarnations, holds or version floors. Do not update
// it when the store's statement changes: it is the record of the mutant.
const unguardedAcquireSQL = `
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

// unguardedStore is the postgres store (same table, same Release, Evict,
// Flags and notifications) with its Acquire replaced by the unguarded
// statement.
type unguardedStore struct {
	*postgres.Store
	pool *pgxpool.Pool
}

// openUnguarded opens the unguarded mutant on a postgres:// DSN (or a
// mysql:// one: unguarded_mysql.go), and
// returns what closes its pool. The schema must exist (the tests migrate
// it with the real store).
func openUnguarded(ctx context.Context, dsn string) (leadership.Store, func(), error) {
	if strings.HasPrefix(dsn, "mysql://") {
		return openUnguardedMySQL(dsn)
	}
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return nil, nil, fmt.Errorf("-unguarded needs a postgres:// or mysql:// DSN")
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %v", err)
	}
	s, err := postgres.New(pool)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return &unguardedStore{Store: s, pool: pool}, pool.Close, nil
}

// Acquire is postgres.Store.Acquire (before the guard) on the unguarded
// statement, without the store's retry and transaction-status check,
// which change nothing on a plain pool.
func (s *unguardedStore) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	if err := req.Validate(); err != nil {
		return leadership.Result{}, err
	}
	micros := (req.Lease + time.Microsecond - 1).Microseconds()
	res := leadership.Result{Record: leadership.Record{Name: req.Name}}
	err := s.pool.QueryRow(ctx, unguardedAcquireSQL, req.Name, req.Holder, req.Version, micros).
		Scan(&res.Acquired, &res.Holder, &res.Version, &res.RenewedAt, &res.ExpiresAt, &res.Now)
	if errors.Is(err, pgx.ErrNoRows) {
		// lost to a concurrent insert: retry soon, as the store does
		return leadership.Result{Record: leadership.Record{Name: req.Name}}, nil
	}
	if err != nil {
		return leadership.Result{}, fmt.Errorf("unguarded acquire: %w", err)
	}
	return res, nil
}
