package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/faultstore"
	"github.com/dbflag/leadership/sqlite"
)

// clocked returns n stores on one new file, each on its own *sql.DB as
// separate processes would be, all reading clock c.
func clocked(t *testing.T, c *sqlite.FakeClock, n int) []*sqlite.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flags.db")
	var out []*sqlite.Store
	for range n {
		out = append(out, openClocked(t, path, c))
	}
	return out
}

func openClocked(t *testing.T, path string, c *sqlite.FakeClock) *sqlite.Store {
	t.Helper()
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := sqlite.NewWithClock(db, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// anchorSlack is how far reported instants may lag the wall clock.
const anchorSlack = time.Second

func acquire(t *testing.T, s leadership.Store, holder string, version int64, lease time.Duration) leadership.Result {
	t.Helper()
	res, err := s.Acquire(context.Background(), leadership.Request{Name: "f", Holder: holder, Version: version, Lease: lease})
	if err != nil {
		t.Fatalf("Acquire by %s: %v", holder, err)
	}
	return res
}

// TestWallClockStepForwardKeepsTheTerm steps the wall clock an hour ahead
// while a term of one minute runs: the term must stay the holder's until a
// minute has passed on the host clock.
func TestWallClockStepForwardKeepsTheTerm(t *testing.T) {
	t.Parallel()
	c := sqlite.NewFakeClock("boot-1")
	s := clocked(t, c, 2)
	const lease = time.Minute
	a := acquire(t, s[0], "a", 0, lease)
	c.StepWall(time.Hour)
	b := acquire(t, s[1], "b", 0, lease)
	if b.Acquired {
		t.Fatalf("b acquired a's term of %v after the wall clock stepped an hour ahead", lease)
	}
	if b.Holder != "a" || b.Version != a.Version {
		t.Fatalf("b's losing result = %+v, want a's term %d", b.Record, a.Version)
	}
	if left := b.ExpiresAt.Sub(b.Now); left <= lease-10*time.Second || left > lease {
		t.Errorf("reported time left = %v, want about %v (the follower schedules its next attempt by it)", left, lease)
	}
	if d := b.Now.Sub(c.Wall()); d < -anchorSlack || d > anchorSlack {
		t.Errorf("reported Now is %v off the wall clock after its step, want the reports to follow it", d)
	}
	if r := acquire(t, s[0], "a", a.Version, lease); !r.Acquired {
		t.Fatalf("a could not renew after the step: %+v", r)
	}
	c.Advance(lease + time.Second)
	if r := acquire(t, s[1], "b", 0, lease); !r.Acquired || r.Version != a.Version+1 {
		t.Fatalf("b after the lease had passed on the host clock = %+v, want acquired with version %d", r, a.Version+1)
	}
}

// TestWallClockStepBackwardDoesNotDelayFailover steps the wall clock an
// hour back: the term still expires one lease after its last renewal.
func TestWallClockStepBackwardDoesNotDelayFailover(t *testing.T) {
	t.Parallel()
	c := sqlite.NewFakeClock("boot-1")
	s := clocked(t, c, 2)
	const lease = time.Minute
	a := acquire(t, s[0], "a", 0, lease)
	c.StepWall(-time.Hour)
	if r := acquire(t, s[1], "b", 0, lease); r.Acquired {
		t.Fatalf("b acquired before the lease had passed: %+v", r)
	}
	c.Advance(lease + time.Second)
	if r := acquire(t, s[1], "b", 0, lease); !r.Acquired || r.Version != a.Version+1 {
		t.Fatalf("b one lease after a's last renewal, the wall clock an hour back = %+v, want acquired", r)
	}
}

// TestWallClockStepsNeverRaiseTwoFlags runs two flags while the wall clock
// steps far ahead, then far back: the follower never raises while the
// holder does, and takes over about one lease after the holder is cut off.
func TestWallClockStepsNeverRaiseTwoFlags(t *testing.T) {
	t.Parallel()
	c := sqlite.NewFakeClock("boot-1")
	s := clocked(t, c, 2)
	const lease = time.Second
	cut := faultstore.Wrap(s[0])
	build := func(st leadership.Store, process string) *leadership.Flag {
		f, err := leadership.NewFlag().Store(st).Name("f").Process(process).Lease(lease).Build(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	a := build(cut, "a")
	waitRaised(t, a, 2*time.Second)
	b := build(s[1], "b")

	var (
		mu      sync.Mutex
		overlap bool
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if a.Raised() && b.Raised() {
				mu.Lock()
				overlap = true
				mu.Unlock()
			}
			time.Sleep(time.Millisecond)
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
		if overlap {
			t.Error("both flags were raised at once")
		}
	}()

	c.StepWall(time.Hour)
	time.Sleep(3 * lease)
	if !a.Raised() || b.Raised() {
		t.Fatalf("3 leases after the wall clock stepped an hour ahead: a raised %v, b raised %v; want a only", a.Raised(), b.Raised())
	}
	c.StepWall(-2 * time.Hour)
	time.Sleep(lease)
	cutAt := time.Now()
	cut.Fail(errors.New("cut off")) // a can no longer reach the file, as if it had died
	waitRaised(t, b, lease+1500*time.Millisecond)
	t.Logf("b raised %v after a was cut off, the wall clock an hour behind (lease %v)", time.Since(cutAt), lease)
}

func waitRaised(t *testing.T, f *leadership.Flag, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); !f.Raised(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("flag not raised within %v", limit)
		}
	}
}

// TestRowsOfAnotherBootAreFree: a term written in an earlier boot, whose
// host clock has started again since, is free at once.
func TestRowsOfAnotherBootAreFree(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flags.db")
	before := openClocked(t, path, sqlite.NewFakeClock("boot-1"))
	after := openClocked(t, path, sqlite.NewFakeClock("boot-2"))
	a := acquire(t, before, "a", 0, time.Hour)
	r := acquire(t, after, "b", 0, time.Hour)
	if !r.Acquired || r.Version != a.Version+1 {
		t.Fatalf("acquire of a row of another boot = %+v, want acquired at once with version %d", r, a.Version+1)
	}
	rows, now, err := before.Flags(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].ExpiresAt.After(now) {
		t.Fatalf("Flags in the old boot = %+v at %v, want the row of the new boot reported expired", rows, now)
	}
}

// TestClockReadAfterTheWriteLock holds the write lock from another
// connection: Acquire must read the clock after it got the lock, not
// before it started to wait.
func TestClockReadAfterTheWriteLock(t *testing.T) {
	t.Parallel()
	c := sqlite.NewFakeClock("boot-1")
	path := filepath.Join(t.TempDir(), "flags.db")
	s := openClocked(t, path, c)
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin() // _txlock=immediate: takes the write lock
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`UPDATE leadership_flags SET holder = holder`); err != nil {
		t.Fatal(err)
	}
	done := make(chan leadership.Result)
	go func() { done <- acquire(t, s, "a", 0, time.Minute) }()
	time.Sleep(300 * time.Millisecond)
	released := time.Now()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if r := <-done; !r.Acquired {
		t.Fatalf("Acquire = %+v, want acquired", r)
	}
	if read := c.LastHostRead(); read.Before(released) {
		t.Fatalf("clock read %v before the write lock was released", released.Sub(read))
	}
}

// TestOneClockReadPerStatement: each statement reads each clock once, so
// that all its instants are one instant, as SQLite's 'now' is.
func TestOneClockReadPerStatement(t *testing.T) {
	t.Parallel()
	c := sqlite.NewFakeClock("boot-1")
	s := clocked(t, c, 1)[0]
	check := func(what string, statements int64, fn func()) {
		t.Helper()
		h0, w0 := c.Reads()
		fn()
		h1, w1 := c.Reads()
		if h1-h0 != statements || w1-w0 != statements {
			t.Errorf("%s read the host clock %d and the wall clock %d times, want %d each", what, h1-h0, w1-w0, statements)
		}
	}
	var a leadership.Result
	check("a winning Acquire", 1, func() { a = acquire(t, s, "a", 0, time.Minute) })
	check("a renewal", 1, func() { acquire(t, s, "a", a.Version, time.Minute) })
	check("a losing Acquire", 2, func() { acquire(t, s, "b", 0, time.Minute) })
	check("Flags", 1, func() {
		if _, _, err := s.Flags(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	check("Release", 1, func() {
		if ok, err := s.Release(context.Background(), "f", "a", a.Version); !ok || err != nil {
			t.Fatalf("Release = %v, %v", ok, err)
		}
	})
}

// v1Acquire is the acquire statement of the versions before migration 2,
// which judged expiry by the wall clock and knew no host_ columns.
const v1Acquire = `
INSERT INTO leadership_flags (name, holder, version, renewed_at, expires_at)
VALUES (?1, ?2, 1, CAST(unixepoch('subsec') * 1000 AS INTEGER), CAST(unixepoch('subsec') * 1000 AS INTEGER) + ?4)
ON CONFLICT (name) DO UPDATE SET
    version = CASE WHEN leadership_flags.holder = excluded.holder AND leadership_flags.version = ?3
                   THEN leadership_flags.version ELSE leadership_flags.version + 1 END,
    holder = excluded.holder,
    renewed_at = excluded.renewed_at,
    expires_at = excluded.expires_at
WHERE (?3 > 0 AND leadership_flags.holder = excluded.holder AND leadership_flags.version = ?3)
   OR leadership_flags.expires_at <= excluded.renewed_at
RETURNING version`

// v1 acquires f for holder with the statement of an older version; it
// reports the version acquired, or 0.
func v1(t *testing.T, db *sql.DB, holder string, version int64, lease time.Duration) int64 {
	t.Helper()
	var got int64
	err := db.QueryRow(v1Acquire, "f", holder, version, lease.Milliseconds()).Scan(&got)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("older version's acquire: %v", err)
	}
	return got
}

// TestOlderVersionSharingTheFile runs an older version's statement beside
// this version's stores, as in a rolling upgrade: neither takes a term
// the other still holds.
func TestOlderVersionSharingTheFile(t *testing.T) {
	t.Parallel()
	c := sqlite.NewFakeClock("boot-1")
	path := filepath.Join(t.TempDir(), "flags.db")
	s := []*sqlite.Store{openClocked(t, path, c), openClocked(t, path, c)}
	old, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	const lease = time.Minute

	a := acquire(t, s[0], "a", 0, lease)
	if v := v1(t, old, "old", 0, lease); v != 0 {
		t.Fatalf("the older version acquired a live term of this version (version %d)", v)
	}
	if ok, err := s[0].Release(context.Background(), "f", "a", a.Version); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	// The older version takes the released row; its write leaves the host
	// columns of a's released term behind.
	v := v1(t, old, "old", 0, lease)
	if v != a.Version+1 {
		t.Fatalf("the older version's acquire of a released row = %d, want %d", v, a.Version+1)
	}
	if v := v1(t, old, "old", v, lease); v != a.Version+1 {
		t.Fatalf("the older version's renewal = %d, want %d", v, a.Version+1)
	}
	r := acquire(t, s[1], "b", 0, lease)
	if r.Acquired {
		t.Fatalf("b acquired the older version's live term: %+v", r.Record)
	}
	if r.Holder != "old" || r.ExpiresAt.Sub(r.Now) <= lease-10*time.Second {
		t.Errorf("b's losing result = %+v at %v, want old's term expiring in about %v", r.Record, r.Now, lease)
	}
	c.Advance(lease + time.Second) // the older version's term has expired by the wall clock too
	if r := acquire(t, s[1], "b", 0, lease); !r.Acquired {
		t.Fatalf("b after the older version's term expired = %+v, want acquired", r)
	}
}
