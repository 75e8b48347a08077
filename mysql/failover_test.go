package mysql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/mysql"
)

// incarnationRows reads the MEMORY table of the server's incarnations.
func incarnationRows(t testing.TB, db *sql.DB) map[int64]string {
	t.Helper()
	rows, err := db.Query(`SELECT server_id, incarnation FROM leadership_incarnation`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[int64]string{}
	for rows.Next() {
		var id int64
		var inc string
		if err := rows.Scan(&id, &inc); err != nil {
			t.Fatal(err)
		}
		got[id] = inc
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestIncarnationChangesWhenTheServerCrashes kills a private MariaDB that
// runs with innodb_flush_log_at_trx_commit=0 (it may lose the last second
// of commits) with SIGKILL and starts it again: in both modes the server
// then has a new incarnation, the first acquire statement records it and
// holds new terms for one lease, and a live holder renews at once.
func TestIncarnationChangesWhenTheServerCrashes(t *testing.T) {
	t.Parallel()
	srv := testdb.StartMariaDB(t, "--innodb-flush-log-at-trx-commit=0", "--server-id=7")
	const lease = time.Minute
	type side struct {
		db    *sql.DB
		store *mysql.Store
		held  leadership.Result
		inc   string
	}
	sides := map[string]*side{}
	for _, m := range modes {
		db := openDB(t, srv.NewDatabase(t, m.name))
		s := &side{db: db, store: newStore(t, db, m.opts...)}
		if err := s.store.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.held = acquire(t, s.store, "held", "a", 0, lease)
		acquire(t, s.store, "free", "a", 0, 20*time.Millisecond)
		s.inc = readGuard(t, db).incarnation
		if rows := incarnationRows(t, db); len(rows) != 1 || rows[7] != s.inc || !strings.HasPrefix(s.inc, "7/") {
			t.Fatalf("%s: incarnation rows %v, guard record's %q; want one row of server 7, recorded", m.name, rows, s.inc)
		}
		sides[m.name] = s
	}
	time.Sleep(1500 * time.Millisecond) // InnoDB writes and flushes its log each second
	srv.Crash(t)

	for name, s := range sides {
		if rows := incarnationRows(t, s.db); len(rows) != 0 {
			t.Fatalf("%s: the incarnation table after the crash holds %v, want it empty", name, rows)
		}
		renewed := acquire(t, s.store, "held", "a", s.held.Version, lease)
		if !renewed.Acquired || renewed.Version != s.held.Version {
			t.Fatalf("%s: live holder's renewal after the crash = %+v, want version %d", name, renewed, s.held.Version)
		}
		g := readGuard(t, s.db)
		if g.incarnation == s.inc || !strings.HasPrefix(g.incarnation, "7/") || g.holdUntil < renewed.Now.Add(lease/2).UnixMicro() {
			t.Fatalf("%s: guard record after the crash = %+v, want a new incarnation of server 7 (was %q) held for a lease", name, g, s.inc)
		}
		if res := acquire(t, s.store, "free", "b", 0, lease); res.Acquired {
			t.Fatalf("%s: takeover of an expired row right after the crash = %+v, want it held", name, res)
		}
	}
}

// TestIncarnationIsTheServersOwn: rows of the incarnation table replicate
// like any other, so a promoted replica holds its former source's row; a
// server looks only for its own @@server_id (which replication requires to
// differ), so it never takes that row for its own incarnation.
func TestIncarnationIsTheServersOwn(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		s, db, _ := guarded(t, opts...)
		var id int64
		if err := db.QueryRow(`SELECT @@server_id`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		source := id + 1
		if _, err := db.Exec(`INSERT INTO leadership_incarnation VALUES (?, CONCAT(?, '/replicated'))`, source, source); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`UPDATE leadership_guard SET incarnation = CONCAT(?, '/replicated'), max_lease = ?`, source, time.Minute.Microseconds()); err != nil {
			t.Fatal(err)
		}
		res := acquire(t, s, "f", "a", 0, time.Second)
		g := readGuard(t, db)
		if res.Acquired || g.incarnation == "" || strings.HasSuffix(g.incarnation, "/replicated") || g.holdUntil < res.Now.Add(50*time.Second).UnixMicro() {
			t.Fatalf("first acquisition on a server holding its source's incarnation row = %+v, record %+v; want a new incarnation and a hold of the longest lease", res, g)
		}
	})
}

// TestReadOnlyErrorsNameTheFix: an acquisition in a read-only session
// (error 1792, as in a read-only transaction on a replica) fails with an
// error that says to connect to the primary and names rejectReadOnly.
func TestReadOnlyErrorsNameTheFix(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		_, _, dsn := guarded(t, opts...)
		db := openDB(t, dsn)
		db.SetMaxOpenConns(1)
		if _, err := db.Exec(`SET SESSION TRANSACTION READ ONLY`); err != nil {
			t.Fatal(err)
		}
		_, err := newStore(t, db, opts...).Acquire(context.Background(), leadership.Request{Name: "f", Holder: "a", Lease: time.Minute})
		if err == nil || !strings.Contains(err.Error(), "connect to the primary") || !strings.Contains(err.Error(), "rejectReadOnly=true") {
			t.Fatalf("Acquire in a read-only session = %v, want an error naming the primary and rejectReadOnly=true", err)
		}
	})
}

// TestFlagRecoversWhenTheServerIsWritableAgain flips a private server's
// read_only on, as a demoted primary's, and off again: the flag lowers
// (its renewals fail with error 1290, which names the fix), never raises
// while the server refuses writes, and raises again once it accepts them.
func TestFlagRecoversWhenTheServerIsWritableAgain(t *testing.T) {
	t.Parallel()
	srv := testdb.StartMariaDB(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			db := openDB(t, srv.NewDatabase(t, m.name))
			s := newStore(t, db, m.opts...)
			ctx := context.Background()
			flag, err := leadership.NewFlag().Store(s).Name("f").Lease(time.Second).Build(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer flag.Close()
			waitFor := func(what string, cond func() bool) {
				t.Helper()
				for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%s: not within 15 s", what)
					}
				}
			}
			waitFor("the flag raises", flag.Raised)
			if _, err := srv.Root.Exec(`SET GLOBAL read_only = 1`); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = srv.Root.Exec(`SET GLOBAL read_only = 0`) })
			waitFor("the flag lowers on a read-only server", func() bool { return !flag.Raised() })
			_, err = s.Acquire(ctx, leadership.Request{Name: "f", Holder: "other", Lease: time.Second})
			if err == nil || !strings.Contains(err.Error(), "Error 1290") || !strings.Contains(err.Error(), "rejectReadOnly=true") {
				t.Fatalf("Acquire on a read-only server = %v, want error 1290 naming rejectReadOnly=true", err)
			}
			for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if flag.Raised() {
					t.Fatal("the flag raised while the server refused writes")
				}
			}
			if _, err := srv.Root.Exec(`SET GLOBAL read_only = 0`); err != nil {
				t.Fatal(err)
			}
			waitFor("the flag raises again once the server accepts writes", flag.Raised)
		})
	}
}
