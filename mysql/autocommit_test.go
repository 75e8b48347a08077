package mysql_test

import (
	"context"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/migrations"
	"github.com/dbflag/leadership/mysql"
)

// autocommitOff is the DSN parameter that go-sql-driver passes on as
// SET autocommit=0 for every connection of the pool.
var autocommitOff = map[string]string{"autocommit": "0"}

// TestTermSurvivesItsHolderWithAutocommitOff is the fault of sessions
// without autocommit: a term the store reported acquired must be committed,
// so another process sees it held (and is not blocked by it) and it does
// not vanish when its holder's connections close. Before the procedure
// committed, b waited for a's uncommitted row until a lock wait timeout,
// and once a's pool closed its term was rolled back and b got a's token.
func TestTermSurvivesItsHolderWithAutocommitOff(t *testing.T) {
	t.Parallel()
	inModes(t, termSurvivesItsHolder)
}

func termSurvivesItsHolder(t *testing.T, opts ...mysql.Option) {
	// The schema is applied as an administrator would, with autocommit
	// on; the two processes run without it.
	admin := freshDatabase(t, testdb.MySQL(t), nil)
	ctx := context.Background()
	if err := newStore(t, openDB(t, admin), opts...).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cfg, err := driver.ParseDSN(admin)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params = map[string]string{"autocommit": "0", "innodb_lock_wait_timeout": "2"}
	dsn := cfg.FormatDSN()
	dbA := openDB(t, dsn)
	a, b := newStore(t, dbA, opts...), newStore(t, openDB(t, dsn), opts...)
	const name = "committed"
	won, err := a.Acquire(ctx, leadership.Request{Name: name, Holder: "a", Lease: time.Minute})
	if err != nil || !won.Acquired {
		t.Fatalf("a: Acquire = %+v, %v", won, err)
	}
	lost, err := b.Acquire(ctx, leadership.Request{Name: name, Holder: "b", Lease: time.Minute})
	if err != nil || lost.Acquired || lost.Holder != "a" || lost.Version != won.Version {
		t.Errorf("b while a holds version %d: Acquire = %+v, %v; want a's term reported, without error", won.Version, lost, err)
	}
	dbA.Close() // a's process ends; anything it left uncommitted is rolled back
	res, err := b.Acquire(ctx, leadership.Request{Name: name, Holder: "b", Lease: time.Minute})
	if err != nil {
		t.Fatalf("b after a's pool closed: %v", err)
	}
	if res.Acquired {
		t.Fatalf("b acquired %+v while a trusts version %d for a minute: two trusted terms (token %d and %d)", res, won.Version, won.Version, res.Version)
	}
}

// TestConformanceAutocommitOff runs the store suite with autocommit=0 in
// the DSN.
func TestConformanceAutocommitOff(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		runSuite(t, freshDatabase(t, testdb.MySQL(t), autocommitOff), opts...)
	})
}

// TestNothingLeftOpenWithAutocommitOff checks, on a pool of one session
// with autocommit=0, that no store call leaves a transaction open in the
// session (it would hold locks and an old snapshot, and be rolled back at
// disconnection), that reads see changes committed by other sessions
// since, and that Migrate leaves the session's autocommit as it found it.
func TestNothingLeftOpenWithAutocommitOff(t *testing.T) {
	t.Parallel()
	inModes(t, nothingLeftOpen)
}

func nothingLeftOpen(t *testing.T, opts ...mysql.Option) {
	dsn := freshDatabase(t, testdb.MySQL(t), autocommitOff)
	db := openDB(t, dsn)
	db.SetMaxOpenConns(1)
	s, other := newStore(t, db, opts...), newStore(t, openDB(t, dsn), opts...)
	ctx := context.Background()
	// MySQL has no in_transaction, and its transaction tables need the
	// PROCESS privilege: there, only the effects are checked.
	mariadb := isMariaDB(t, db)
	openTx := func(after string) {
		t.Helper()
		if !mariadb {
			return
		}
		var n int
		if err := db.QueryRow(`SELECT @@in_transaction`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("after %s the session has a transaction open", after)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	openTx("Migrate")
	var autocommit int
	if err := db.QueryRow(`SELECT @@SESSION.autocommit`).Scan(&autocommit); err != nil || autocommit != 0 {
		t.Fatalf("autocommit after Migrate = %d, %v; want 0 as the DSN set it", autocommit, err)
	}
	if _, _, err := s.SchemaVersion(ctx); err != nil {
		t.Fatal(err)
	}
	openTx("SchemaVersion")
	if _, _, err := s.Flags(ctx); err != nil {
		t.Fatal(err)
	}
	openTx("Flags")
	won, err := s.Acquire(ctx, leadership.Request{Name: "f", Holder: "a", Lease: time.Minute})
	if err != nil || !won.Acquired {
		t.Fatalf("Acquire = %+v, %v", won, err)
	}
	openTx("a winning Acquire")
	if ok, err := other.Evict(ctx, "f"); err != nil || !ok {
		t.Fatalf("Evict by another session = %v, %v", ok, err)
	}
	// Flags reads the eviction, not the snapshot of an earlier read.
	if recs, _, err := s.Flags(ctx); err != nil || len(recs) != 1 || recs[0].Holder != "" {
		t.Fatalf("Flags after another session's Evict = %+v, %v; want the flag free", recs, err)
	}
	openTx("Flags")
	if res, err := s.Acquire(ctx, leadership.Request{Name: "f", Holder: "a", Version: won.Version, Lease: time.Minute}); err != nil || res.Acquired {
		t.Fatalf("renewal of an evicted term = %+v, %v; want not acquired", res, err)
	}
	openTx("a losing Acquire")
	if ok, err := s.Evict(ctx, "f"); err != nil || ok {
		t.Fatalf("Evict of a free flag = %v, %v", ok, err)
	}
	openTx("Evict")
	res, err := s.Acquire(ctx, leadership.Request{Name: "g", Holder: "a", Lease: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	if ok, err := s.Release(ctx, "g", "a", res.Version); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	openTx("Release")
	if res, err := other.Acquire(ctx, leadership.Request{Name: "g", Holder: "b", Lease: time.Minute}); err != nil || !res.Acquired {
		t.Fatalf("another session after the release = %+v, %v; want acquired", res, err)
	}
	// A batch (leadership_acquire_many, or statement mode's transaction)
	// commits too: another session takes over what it released.
	batch, err := s.AcquireTogether(ctx, leadership.Request{Name: "h1", Holder: "a", Lease: time.Minute},
		leadership.Request{Name: "h2", Holder: "a", Lease: time.Minute})
	if err != nil || !batch[0].Acquired || !batch[1].Acquired {
		t.Fatalf("a batch = %+v, %v; want both acquired", batch, err)
	}
	openTx("a batch")
	if recs, _, err := other.Flags(ctx); err != nil || len(recs) != 4 || recs[2].Holder != "a" || recs[3].Holder != "a" {
		t.Fatalf("another session's Flags after a batch = %+v, %v; want h1 and h2 held by a", recs, err)
	}
}

// TestRefusesUncommittingProcedure checks that Acquire does not trust the
// procedure of schema version 2, which did not commit without autocommit.
func TestRefusesUncommittingProcedure(t *testing.T) {
	t.Parallel()
	db := openDB(t, freshDatabase(t, testdb.MySQL(t), nil))
	s := newStore(t, db)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	old, err := migrations.FS.ReadFile("mysql/0002_create_acquire.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DROP PROCEDURE leadership_acquire`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(string(old)); err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx, leadership.Request{Name: "f", Holder: "a", Lease: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "older than schema version 4") || !strings.Contains(err.Error(), "apply the migrations") {
		t.Fatalf("Acquire through the procedure of schema 2 = %v, want an error naming the migrations", err)
	}
}

// TestConformanceServerAutocommitOff runs the store suite on a MariaDB
// server of the test's own whose sessions start with autocommit off
// without the DSN saying so: first through init_connect='SET autocommit=0'
// (which applies to users without CONNECTION ADMIN, such as an
// application's), then through a global autocommit=0. Both are global
// settings, hence a private server and not the shared one.
func TestConformanceServerAutocommitOff(t *testing.T) {
	t.Parallel()
	srv := testdb.StartMariaDB(t, "--init-connect=SET autocommit=0")
	for _, variant := range []struct{ name, global string }{
		{"init_connect", ""},
		{"global", "SET GLOBAL init_connect = '', GLOBAL autocommit = 0"},
	} {
		t.Run(variant.name, func(t *testing.T) {
			if variant.global != "" {
				if _, err := srv.Root.Exec(variant.global); err != nil {
					t.Fatal(err)
				}
			}
			inModes(t, func(t *testing.T, opts ...mysql.Option) {
				dsn := srv.NewDatabase(t, "app")
				var autocommit int
				if err := openDB(t, dsn).QueryRow(`SELECT @@SESSION.autocommit`).Scan(&autocommit); err != nil || autocommit != 0 {
					t.Fatalf("the application user's session has autocommit = %d, %v; want 0 from the server", autocommit, err)
				}
				runSuite(t, dsn, opts...)
			})
		})
	}
}
