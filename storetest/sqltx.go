package storetest

import (
	"context"
	"database/sql"

	"github.com/dbflag/leadership"
)

// SQLTx is a [FenceTx] on a database/sql transaction, for the stores on
// database/sql (mysql, sqlite): Tx is the transaction, FenceFunc the
// store's Fence function. Its statements use ? placeholders.
type SQLTx struct {
	Tx        *sql.Tx
	FenceFunc func(context.Context, *sql.Tx, leadership.Leader) error
}

// Fence implements [FenceTx].
func (s SQLTx) Fence(ctx context.Context, leader leadership.Leader) error {
	return s.FenceFunc(ctx, s.Tx, leader)
}

// Insert implements [FenceTx].
func (s SQLTx) Insert(ctx context.Context, table string, token, seq int64) error {
	_, err := s.Tx.ExecContext(ctx, `INSERT INTO `+table+` (token, seq) VALUES (?, ?)`, token, seq)
	return err
}

// Rows implements [FenceTx].
func (s SQLTx) Rows(ctx context.Context, table string) ([][2]int64, error) {
	rows, err := s.Tx.QueryContext(ctx, `SELECT token, seq FROM `+table+` ORDER BY token, seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][2]int64
	for rows.Next() {
		var v [2]int64
		if err := rows.Scan(&v[0], &v[1]); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Commit implements [FenceTx].
func (s SQLTx) Commit(context.Context) error { return s.Tx.Commit() }

// Rollback implements [FenceTx].
func (s SQLTx) Rollback(context.Context) error { return s.Tx.Rollback() }
