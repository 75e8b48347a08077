package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/sqlite"
	"github.com/dbflag/leadership/storetest"
)

// TestConformance runs the store suite with every store on its own
// *sql.DB over one database file, as separate processes would share it.
func TestConformance(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flags.db")
	storetest.Run(t, func(t testing.TB) leadership.Store {
		db, err := sqlite.Open(path)
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		t.Cleanup(func() { db.Close() })
		return newStore(t, db)
	})
}

func newStore(t testing.TB, db *sql.DB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.New(db)
	if err != nil {
		t.Fatalf("sqlite.New: %v", err)
	}
	return s
}

func TestSchemaVersion(t *testing.T) {
	t.Parallel()
	db, err := sqlite.Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := newStore(t, db)
	if v, dirty, err := s.SchemaVersion(context.Background()); err != nil || v != 0 || dirty {
		t.Fatalf("before Migrate: SchemaVersion = %d, %v, %v; want 0, false, nil", v, dirty, err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, dirty, err := s.SchemaVersion(context.Background()); err != nil || v != 2 || dirty {
		t.Fatalf("after Migrate: SchemaVersion = %d, %v, %v; want 2, false, nil", v, dirty, err)
	}
	if err := db.Ping(); err != nil {
		t.Fatalf("Migrate closed the caller's database: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	if _, err := sqlite.Open(""); !errors.Is(err, leadership.ErrInvalidArgument) {
		t.Errorf("Open(\"\") = %v, want ErrInvalidArgument", err)
	}
}

// TestSetupFailures: a nil db, a hand-made table of the wrong shape and a
// closed database each fail with an error that says what to fix.
func TestSetupFailures(t *testing.T) {
	open := func(t testing.TB, name string) *sql.DB {
		t.Helper()
		db, err := sqlite.Open(filepath.Join(t.TempDir(), name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	storetest.RunSetupFailures(t, storetest.Setup{
		NewNil: func() error { _, err := sqlite.New(nil); return err },
		WrongShape: func(t testing.TB) leadership.Store {
			db := open(t, "wrong.db")
			if _, err := db.Exec(`CREATE TABLE leadership_flags (name TEXT PRIMARY KEY, owner TEXT)`); err != nil {
				t.Fatal(err)
			}
			return newStore(t, db)
		},
		ShapeError: []string{"does not have the columns"},
		// A database file has no server to be down: its equivalent is a
		// closed database.
		Unreachable: func(t testing.TB, _ string) (leadership.Store, string) {
			db := open(t, "closed.db")
			db.Close()
			return newStore(t, db), ""
		},
		UnreachableError: "closed",
	})
}

// TestSessionInsideTransaction: a connection that a hook, a DSN pragma or a
// stray db.Exec("BEGIN") left inside a transaction must not have a write
// trusted that its transaction then rolls back. Each write refuses such a
// connection with an error that names the fault.
func TestSessionInsideTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flags.db")
	open := func() *sql.DB {
		t.Helper()
		db, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	if err := newStore(t, open()).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	inTx := open()
	inTx.SetMaxOpenConns(1)
	if _, err := inTx.Exec("BEGIN"); err != nil {
		t.Fatal(err)
	}
	a := newStore(t, inTx)
	res, err := a.Acquire(ctx, leadership.Request{Name: "f", Holder: "a", Lease: time.Minute})
	if err == nil {
		inTx.Close() // ends the session: its open transaction rolls back
		other, oerr := newStore(t, open()).Acquire(ctx, leadership.Request{Name: "f", Holder: "b", Lease: time.Minute})
		t.Fatalf("Acquire inside an open transaction = %+v, nil; want an error. Then b: %+v, %v (two trusted terms with token %d)",
			res, other, oerr, res.Version)
	}
	if !strings.Contains(err.Error(), "inside a transaction") {
		t.Fatalf("Acquire inside an open transaction: %v; want it to say the connection is inside a transaction", err)
	}
	if _, err := a.Release(ctx, "f", "a", 1); err == nil || !strings.Contains(err.Error(), "inside a transaction") {
		t.Fatalf("Release inside an open transaction: %v; want an error saying so", err)
	}
	if _, err := a.Evict(ctx, "f"); err == nil || !strings.Contains(err.Error(), "inside a transaction") {
		t.Fatalf("Evict inside an open transaction: %v; want an error saying so", err)
	}
}

// TestARowWithANullIsUnreadable lists the flags of a table made by hand
// without NOT NULL constraints, with a NULL written in a different column
// of each of four rows: Flags returns every row, those four with their
// names only, and names each in an error, a sqlstore.UnreadableRows.
func TestARowWithANullIsUnreadable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "flags.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE leadership_flags (name TEXT PRIMARY KEY, holder TEXT, version INTEGER, renewed_at INTEGER, expires_at INTEGER)`); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, db)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	columns := []string{"holder", "version", "renewed_at", "expires_at"}
	for _, name := range append([]string{"good"}, columns...) {
		if res, err := s.Acquire(ctx, leadership.Request{Name: name, Holder: "a", Lease: time.Minute}); err != nil || !res.Acquired {
			t.Fatalf("acquire %s = %+v, %v", name, res, err)
		}
	}
	for _, c := range columns {
		if _, err := db.Exec(`UPDATE leadership_flags SET `+c+` = NULL WHERE name = ?`, c); err != nil {
			t.Fatal(err)
		}
	}
	recs, _, err := s.Flags(ctx)
	testdb.CheckUnreadable(t, recs, err, "good", columns)
}
