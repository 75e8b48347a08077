package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"

	driver "github.com/go-sql-driver/mysql"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/mysql"
	"github.com/dbflag/leadership/storetest"
)

// TestFence runs the fenced-transaction suite on a real server, in a
// database of its own, in both modes of the acquire statement.
func TestFence(t *testing.T) {
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		dsn := freshDatabase(t, testdb.MySQL(t), nil)
		db := openDB(t, dsn)
		storetest.RunFence(t, storetest.Fencing{
			Open: func(t testing.TB) leadership.Store { return newStore(t, openDB(t, dsn), opts...) },
			Table: func(t testing.TB) string {
				var b [5]byte
				_, _ = rand.Read(b[:])
				table := "fence_" + hex.EncodeToString(b[:])
				if _, err := db.Exec(`CREATE TABLE ` + table + ` (token BIGINT NOT NULL, seq BIGINT NOT NULL) ENGINE = InnoDB`); err != nil {
					t.Fatalf("create table: %v", err)
				}
				return table
			},
			Begin: func(t testing.TB) storetest.FenceTx {
				tx, err := openDB(t, dsn).Begin()
				if err != nil {
					t.Fatalf("begin: %v", err)
				}
				return storetest.SQLTx{Tx: tx, FenceFunc: mysql.Fence}
			},
			RunFenced: func(ctx context.Context, leader leadership.Leader, fn func(storetest.FenceTx) error) error {
				return mysql.RunFenced(ctx, db, leader, func(tx *sql.Tx) error {
					return fn(storetest.SQLTx{Tx: tx, FenceFunc: mysql.Fence})
				})
			},
			Retry: &driver.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock (test)"},
		})
	})
}
