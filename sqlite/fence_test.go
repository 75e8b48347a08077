package sqlite_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/sqlite"
	"github.com/dbflag/leadership/storetest"
)

// TestFence runs the fenced-transaction suite with every store and
// transaction on its own *sql.DB over one database file, as separate
// processes would share it: once with transactions that begin deferred
// (database/sql's default BEGIN, so the fence's own write takes the write
// lock) and once with BEGIN IMMEDIATE, as a *sql.DB from sqlite.Open
// begins them.
func TestFence(t *testing.T) {
	for _, txlock := range []string{"deferred", "immediate"} {
		t.Run(txlock, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "flags.db")
			open := func(t testing.TB) *sql.DB {
				db, err := sqlite.Open(path)
				if err != nil {
					t.Fatalf("open %s: %v", path, err)
				}
				t.Cleanup(func() { db.Close() })
				return db
			}
			openTx := func(t testing.TB) *sql.DB {
				db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_txlock="+txlock)
				if err != nil {
					t.Fatalf("open %s: %v", path, err)
				}
				t.Cleanup(func() { db.Close() })
				return db
			}
			db := openTx(t)
			storetest.RunFence(t, storetest.Fencing{
				Open: func(t testing.TB) leadership.Store { return newStore(t, open(t)) },
				Table: func(t testing.TB) string {
					var b [5]byte
					_, _ = rand.Read(b[:])
					table := "fence_" + hex.EncodeToString(b[:])
					if _, err := db.Exec(`CREATE TABLE ` + table + ` (token INTEGER NOT NULL, seq INTEGER NOT NULL)`); err != nil {
						t.Fatalf("create table: %v", err)
					}
					return table
				},
				Begin: func(t testing.TB) storetest.FenceTx {
					tx, err := openTx(t).Begin()
					if err != nil {
						t.Fatalf("begin: %v", err)
					}
					return storetest.SQLTx{Tx: tx, FenceFunc: sqlite.Fence}
				},
				RunFenced: func(ctx context.Context, leader leadership.Leader, fn func(storetest.FenceTx) error) error {
					return sqlite.RunFenced(ctx, db, leader, func(tx *sql.Tx) error {
						return fn(storetest.SQLTx{Tx: tx, FenceFunc: sqlite.Fence})
					})
				},
				Retry:     busyError{},
				OneWriter: true,
			})
		})
	}
}

// busyError is SQLITE_BUSY_SNAPSHOT as modernc.org/sqlite reports it:
// an error with the extended result code.
type busyError struct{}

func (busyError) Error() string { return "database is locked (SQLITE_BUSY_SNAPSHOT, test)" }
func (busyError) Code() int     { return 5 | 2<<8 }

// TestFenceLeavesTheTermAlone checks that the fence's write changes
// nothing of the term: not the holder, version or expiry, and not the
// host-clock columns, which migration 2's trigger would clear if the
// fence changed the row without counting itself in host_writes (the row
// would then be judged by the wall clock).
func TestFenceLeavesTheTermAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "flags.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := newStore(t, db)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(ctx, leadership.Request{Name: "f", Holder: "a", Lease: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	const cols = `holder, version, expires_at, host_boot, host_renewed_at, host_expires_at`
	read := func() (row [6]any) {
		t.Helper()
		dest := make([]any, len(row))
		for i := range row {
			dest[i] = &row[i]
		}
		if err := db.QueryRow(`SELECT ` + cols + ` FROM leadership_flags WHERE name = 'f'`).Scan(dest...); err != nil {
			t.Fatal(err)
		}
		return row
	}
	before := read()
	if err := sqlite.RunFenced(ctx, db, leadership.Term{Name: "f", Holder: "a", Version: res.Version}, func(*sql.Tx) error { return nil }); err != nil {
		t.Fatalf("RunFenced: %v", err)
	}
	if after := read(); after != before || after[3] == "" {
		t.Fatalf("(%s) = %v before the fence, %v after: want it unchanged, with a host boot", cols, before, after)
	}
}
