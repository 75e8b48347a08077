package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/postgres"
	"github.com/dbflag/leadership/storetest"
)

// TestFence runs the fenced-transaction suite on a real server.
func TestFence(t *testing.T) {
	t.Parallel()
	// A schema of its own: the shared one may hold a newer schema
	// version, applied by the tests of another branch.
	dsn := schemaDSN(t, testdb.Postgres(t))
	pool := newPool(t, dsn)
	storetest.RunFence(t, storetest.Fencing{
		Open: func(t testing.TB) leadership.Store { return newStore(t, newPool(t, dsn)) },
		Table: func(t testing.TB) string {
			table := "fence_" + randomHex()
			if _, err := pool.Exec(context.Background(), `CREATE TABLE `+table+` (token bigint NOT NULL, seq bigint NOT NULL)`); err != nil {
				t.Fatalf("create table: %v", err)
			}
			t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE `+table) })
			return table
		},
		Begin: func(t testing.TB) storetest.FenceTx {
			tx, err := newPool(t, dsn).Begin(context.Background())
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			return pgTx{tx}
		},
		RunFenced: func(ctx context.Context, leader leadership.Leader, fn func(storetest.FenceTx) error) error {
			return postgres.RunFenced(ctx, pool, leader, func(tx pgx.Tx) error { return fn(pgTx{tx}) })
		},
		Retry: &pgconn.PgError{Code: "40001", Message: "could not serialize access (test)"},
	})
}

// pgTx is a pgx transaction as the suite sees it.
type pgTx struct{ tx pgx.Tx }

func (p pgTx) Fence(ctx context.Context, leader leadership.Leader) error {
	return postgres.Fence(ctx, p.tx, leader)
}

func (p pgTx) Insert(ctx context.Context, table string, token, seq int64) error {
	_, err := p.tx.Exec(ctx, `INSERT INTO `+table+` (token, seq) VALUES ($1, $2)`, token, seq)
	return err
}

func (p pgTx) Rows(ctx context.Context, table string) ([][2]int64, error) {
	rows, err := p.tx.Query(ctx, `SELECT token, seq FROM `+table+` ORDER BY token, seq`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]int64, error) {
		var v [2]int64
		err := r.Scan(&v[0], &v[1])
		return v, err
	})
}

func (p pgTx) Commit(ctx context.Context) error   { return p.tx.Commit(ctx) }
func (p pgTx) Rollback(ctx context.Context) error { return p.tx.Rollback(ctx) }
