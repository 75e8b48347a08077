package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/batchtest"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/migrations"
	"github.com/dbflag/leadership/mysql"
	"github.com/dbflag/leadership/storetest"
)

// guardRecord is the failover guard's record (leadership_guard).
type guardRecord struct {
	incarnation                       string
	holdUntil, versionFloor, maxLease int64
}

func readGuard(t testing.TB, db *sql.DB) guardRecord {
	t.Helper()
	var g guardRecord
	if err := db.QueryRow(`SELECT incarnation, hold_until, version_floor, max_lease FROM leadership_guard WHERE id = 1`).Scan(
		&g.incarnation, &g.holdUntil, &g.versionFloor, &g.maxLease); err != nil {
		t.Fatal(err)
	}
	return g
}

// newIncarnation makes the store see a new incarnation of the server, as
// after a restart (which empties the MEMORY table) or on a promoted
// replica (which finds no row for its own server_id).
func newIncarnation(t testing.TB, db *sql.DB) {
	t.Helper()
	if _, err := db.Exec(`DELETE FROM leadership_incarnation`); err != nil {
		t.Fatal(err)
	}
}

// guarded is a migrated store of opts on a database of the test's own, and
// that database's pool.
func guarded(t *testing.T, opts ...mysql.Option) (*mysql.Store, *sql.DB, string) {
	t.Helper()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	db := openDB(t, dsn)
	s := newStore(t, db, opts...)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, db, dsn
}

// dbNow reads the database clock.
func dbNow(t testing.TB, s *mysql.Store) time.Time {
	t.Helper()
	_, now, err := s.Flags(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return now
}

func acquire(t testing.TB, s leadership.Store, name, holder string, version int64, lease time.Duration) leadership.Result {
	t.Helper()
	res, err := s.Acquire(context.Background(), leadership.Request{Name: name, Holder: holder, Version: version, Lease: lease})
	if err != nil {
		t.Fatalf("Acquire(%q, %q, %d): %v", name, holder, version, err)
	}
	return res
}

// TestFirstIncarnationOfASchemaHoldsNothing: a new schema's first acquire
// statement records the server's incarnation and the lease, and starts a
// term at version 1 at once; later statements leave the record alone
// unless the lease grows.
func TestFirstIncarnationOfASchemaHoldsNothing(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		s, db, _ := guarded(t, opts...)
		// The migration records the incarnation it ran under (migrations
		// 0010 and 0011), so that a crash losing the schema's first terms
		// is a new incarnation, not a fresh schema.
		var current string
		if err := db.QueryRow(`SELECT incarnation FROM leadership_incarnation WHERE server_id = @@server_id`).Scan(&current); err != nil {
			t.Fatal(err)
		}
		if g := readGuard(t, db); g != (guardRecord{incarnation: current}) {
			t.Fatalf("guard record of a new schema = %+v, want the incarnation %q it was migrated under and nothing else", g, current)
		}
		res := acquire(t, s, "f", "a", 0, time.Minute)
		if !res.Acquired || res.Version != 1 {
			t.Fatalf("first acquisition = %+v, want version 1", res)
		}
		g := readGuard(t, db)
		var serverID string
		if err := db.QueryRow(`SELECT @@server_id`).Scan(&serverID); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(g.incarnation, serverID+"/") || g.holdUntil != 0 || g.versionFloor != 0 || g.maxLease != time.Minute.Microseconds() {
			t.Fatalf("guard record = %+v, want this server's incarnation (%s/…), no hold, no floor, max_lease 1 min", g, serverID)
		}
		acquire(t, s, "g", "a", 0, time.Second)
		if again := readGuard(t, db); again != g {
			t.Fatalf("guard record after a shorter lease = %+v, want unchanged %+v", again, g)
		}
	})
}

// TestALiveHolderRenewsAtOnceAfterANewIncarnation: after a failover with a
// live holder nothing waits: its unexpired term renews at once, with its
// version, while another process cannot take over.
func TestALiveHolderRenewsAtOnceAfterANewIncarnation(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		s, db, dsn := guarded(t, opts...)
		other := newStore(t, openDB(t, dsn), opts...)
		won := acquire(t, s, "f", "a", 0, time.Minute)
		before := readGuard(t, db)
		newIncarnation(t, db)
		t0 := dbNow(t, s)
		renewed := acquire(t, s, "f", "a", won.Version, time.Minute)
		if !renewed.Acquired || renewed.Version != won.Version {
			t.Fatalf("renewal after a new incarnation = %+v, want version %d renewed", renewed, won.Version)
		}
		g := readGuard(t, db)
		if g.incarnation == before.incarnation || g.holdUntil < t0.Add(time.Minute).UnixMicro() {
			t.Fatalf("guard record after the new incarnation = %+v (before %+v), want a new incarnation and a hold of one lease", g, before)
		}
		if res := acquire(t, other, "f", "b", 0, time.Minute); res.Acquired || res.Holder != "a" || res.Version != won.Version {
			t.Fatalf("another process during the hold = %+v, want a's term", res)
		}
	})
}

// TestNewTermsWaitForTheHoldAfterANewIncarnation: after a new incarnation
// no takeover of an expired row and no first acquisition happens before
// the hold (one longest lease from the statement that noticed it) has
// passed, an expired term of the holder does not renew, losers are told
// the hold's end; after it, new terms get versions at or above the floor
// (the clock in microseconds when the incarnation was noticed).
func TestNewTermsWaitForTheHoldAfterANewIncarnation(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		const lease = 1500 * time.Millisecond
		s, db, dsn := guarded(t, opts...)
		other := newStore(t, openDB(t, dsn), opts...)
		won := acquire(t, s, "f", "a", 0, lease)
		time.Sleep(time.Until(won.ExpiresAt) + 100*time.Millisecond) // the row has expired (same machine's clock)
		newIncarnation(t, db)

		t0 := dbNow(t, s).UnixMicro()
		taken := acquire(t, other, "f", "b", 0, lease)
		g := readGuard(t, db)
		if taken.Acquired || taken.Holder != "a" || taken.Version != won.Version {
			t.Fatalf("takeover of an expired row after a new incarnation = %+v, want refused with a's row reported", taken)
		}
		if g.holdUntil < t0+lease.Microseconds() || g.versionFloor < t0 || g.versionFloor > taken.Now.UnixMicro() {
			t.Fatalf("guard record = %+v after noticing between %d and %d, want a hold of one lease and a floor of the clock then", g, t0, taken.Now.UnixMicro())
		}
		if taken.ExpiresAt.UnixMicro() != g.holdUntil {
			t.Fatalf("refused takeover reports expiry %v, want the hold's end %v", taken.ExpiresAt, time.UnixMicro(g.holdUntil))
		}
		if res := acquire(t, s, "f", "a", won.Version, lease); res.Acquired {
			t.Fatalf("renewal of an expired term during the hold = %+v, want refused: a newer term may have been lost", res)
		}
		first := acquire(t, other, "new", "b", 0, lease)
		if first.Acquired || first.Holder != "" || first.Version != 0 || first.ExpiresAt.UnixMicro() != g.holdUntil {
			t.Fatalf("first acquisition during the hold = %+v, want free but held until %v", first, time.UnixMicro(g.holdUntil))
		}
		if recs, _, err := s.Flags(context.Background()); err != nil || len(recs) != 1 {
			t.Fatalf("Flags during the hold = %+v, %v; want f alone (no row for the refused first acquisition)", recs, err)
		}

		time.Sleep(time.Until(time.UnixMicro(g.holdUntil)) + 100*time.Millisecond)
		for _, name := range []string{"f", "new"} {
			res := acquire(t, other, name, "b", 0, lease)
			if !res.Acquired || res.Version < g.versionFloor {
				t.Fatalf("%s after the hold = %+v, want acquired with a version at or above the floor %d", name, res, g.versionFloor)
			}
			next := acquire(t, other, name, "b", res.Version, lease)
			if !next.Acquired || next.Version != res.Version {
				t.Fatalf("%s: renewal after the hold = %+v, want version %d", name, next, res.Version)
			}
		}
	})
}

// TestConcurrentStatementsNoticeANewIncarnationOnce: many processes that
// notice a new incarnation at once all refuse to take over an expired row,
// and the record holds for one lease from the statement that wrote it.
func TestConcurrentStatementsNoticeANewIncarnationOnce(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		// A lease that outlasts eight acquires on a loaded server.
		const lease = 5 * time.Second
		s, db, dsn := guarded(t, opts...)
		// The processes, connected and past their first schema read: they
		// then notice the new incarnation in one statement each.
		stores := make([]*mysql.Store, 8)
		for i := range stores {
			stores[i] = newStore(t, openDB(t, dsn), opts...)
			acquire(t, stores[i], fmt.Sprintf("warm-%d", i), "b", 0, lease)
		}
		won := acquire(t, s, "f", "a", 0, 20*time.Millisecond)
		acquire(t, s, "g", "a", 0, lease) // records the longest lease
		time.Sleep(time.Until(won.ExpiresAt) + 50*time.Millisecond)
		newIncarnation(t, db)
		t0 := dbNow(t, s)
		var wg sync.WaitGroup
		results := make([]leadership.Result, len(stores))
		errs := make([]error, len(results))
		for i, st := range stores {
			wg.Go(func() {
				results[i], errs[i] = st.Acquire(context.Background(), leadership.Request{Name: "f", Holder: "b", Lease: lease})
			})
		}
		wg.Wait()
		g := readGuard(t, db)
		for i, res := range results {
			// Many inserts of one row at once can deadlock (InnoDB's
			// shared-then-exclusive lock of ON DUPLICATE KEY UPDATE), as
			// without the guard: the store retries once, then reports an
			// error, which a flag takes for a lost attempt.
			if errs[i] != nil && !strings.Contains(errs[i].Error(), "Error 1213") {
				t.Fatalf("process %d: %v", i, errs[i])
			}
			if errs[i] != nil {
				continue
			}
			if res.Acquired {
				t.Fatalf("process %d took over at %v during the hold (record %+v)", i, res.Now, g)
			}
			// A process that read the record written by another holds
			// from that one's clock, a little earlier than its own.
			if res.ExpiresAt.Before(res.Now.Add(lease / 2)) {
				t.Fatalf("process %d was told the flag is held until %v, too soon after its clock %v", i, res.ExpiresAt, res.Now)
			}
		}
		if g.holdUntil < t0.Add(lease).UnixMicro() {
			t.Fatalf("guard record %+v holds until less than one lease after the new incarnation (%v)", g, t0)
		}
	})
}

// TestQuarantineHoldsNewTermsAndNeverShortens: Quarantine stops takeovers
// and first acquisitions until its end, lets the holder renew, never
// shortens a hold, and refuses a duration that is not positive.
func TestQuarantineHoldsNewTermsAndNeverShortens(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		ctx := context.Background()
		s, _, dsn := guarded(t, opts...)
		other := newStore(t, openDB(t, dsn), opts...)
		if until, now, err := s.QuarantinedUntil(ctx); err != nil || !until.Before(now) {
			t.Fatalf("QuarantinedUntil of a new schema = %v, %v, %v; want a hold before now", until, now, err)
		}
		// A term long enough to outlast the three statements before its
		// renewal on a loaded server, which then shortens it.
		won := acquire(t, s, "f", "a", 0, 3*time.Second)
		until, err := s.Quarantine(ctx, 3*time.Second)
		if err != nil || until.Before(won.Now.Add(3*time.Second)) {
			t.Fatalf("Quarantine(3s) = %v, %v; want at least 3 s after %v", until, err, won.Now)
		}
		if got, now, err := s.QuarantinedUntil(ctx); err != nil || !got.Equal(until) || !now.Before(until) {
			t.Fatalf("QuarantinedUntil = %v, %v, %v; want %v", got, now, err, until)
		}
		if shorter, err := s.Quarantine(ctx, time.Millisecond); err != nil || !shorter.Equal(until) {
			t.Fatalf("Quarantine(1ms) during a 3 s hold = %v, %v; want the hold kept until %v", shorter, err, until)
		}
		for _, d := range []time.Duration{0, -time.Second} {
			if _, err := s.Quarantine(ctx, d); !errors.Is(err, leadership.ErrInvalidArgument) {
				t.Fatalf("Quarantine(%v) = %v, want ErrInvalidArgument", d, err)
			}
		}
		renewed := acquire(t, s, "f", "a", won.Version, 300*time.Millisecond)
		if !renewed.Acquired {
			t.Fatalf("holder's renewal during the quarantine = %+v, want renewed", renewed)
		}
		time.Sleep(time.Until(renewed.ExpiresAt) + 100*time.Millisecond)
		if res := acquire(t, other, "f", "b", 0, time.Second); res.Acquired || !res.ExpiresAt.Equal(until) {
			t.Fatalf("takeover of an expired row during the quarantine = %+v, want refused, held until %v", res, until)
		}
		if res := acquire(t, other, "g", "b", 0, time.Second); res.Acquired || res.Holder != "" || !res.ExpiresAt.Equal(until) {
			t.Fatalf("first acquisition during the quarantine = %+v, want free but held until %v", res, until)
		}
		time.Sleep(time.Until(until) + 100*time.Millisecond)
		if res := acquire(t, other, "f", "b", 0, time.Second); !res.Acquired || res.Version != won.Version+1 {
			t.Fatalf("takeover after the quarantine = %+v, want version %d (a quarantine sets no floor)", res, won.Version+1)
		}
		if res := acquire(t, other, "g", "b", 0, time.Second); !res.Acquired || res.Version != 1 {
			t.Fatalf("first acquisition after the quarantine = %+v, want version 1", res)
		}
	})
}

// TestRefusesUnguardedProcedure checks that Acquire does not trust the
// procedure of schema version 4, which has no failover guard.
func TestRefusesUnguardedProcedure(t *testing.T) {
	t.Parallel()
	s, db, _ := guarded(t)
	old, err := migrations.FS.ReadFile("mysql/0004_create_committing_acquire.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP PROCEDURE leadership_acquire`, string(old)} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Acquire(context.Background(), leadership.Request{Name: "f", Holder: "a", Lease: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "older than schema version 9") || !strings.Contains(err.Error(), "apply the migrations") {
		t.Fatalf("Acquire through the procedure of schema 4 = %v, want an error naming the migrations", err)
	}
}

// TestGuardConformance runs the failover guard's suite in both modes, each
// case on a database of its own; a new incarnation is an emptied MEMORY
// table, as after a restart.
func TestGuardConformance(t *testing.T) {
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		base := testdb.MySQL(t)
		storetest.RunGuard(t, func(t testing.TB) (storetest.Open, func(testing.TB)) {
			dsn := freshDatabase(t, base, nil)
			open := func(t testing.TB) leadership.Store { return newStore(t, openDB(t, dsn), opts...) }
			return open, func(t testing.TB) { newIncarnation(t, openDB(t, dsn)) }
		})
	})
}

// TestNoNewTermStartsAfterQuarantineReturned: an acquire that read the
// guard before a quarantine and then waited for a flag's row lock (held by
// a fenced transaction) starts no term after Quarantine returned (issue
// 29): it reads the guard again, locked, before it commits. In both modes,
// alone and in a batch with another name.
func TestNoNewTermStartsAfterQuarantineReturned(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		for _, together := range []bool{false, true} {
			t.Run(map[bool]string{false: "Alone", true: "InABatch"}[together], func(t *testing.T) {
				t.Parallel()
				s, _, dsn := guarded(t, opts...)
				other := newStore(t, openDB(t, dsn), opts...)
				locks := openDB(t, dsn)
				batchtest.CheckQuarantineHoldsAWaitingTakeover(t, s, other, other.AcquireTogether, func(term leadership.Term) func() {
					tx, err := locks.Begin()
					if err != nil {
						t.Fatal(err)
					}
					if err := mysql.Fence(context.Background(), tx, term); err != nil {
						t.Fatal(err)
					}
					return func() { _ = tx.Rollback() }
				}, together)
			})
		}
	})
}

// TestAQuarantineCutDuringATrySaysTheRecordStayedLocked: a Quarantine
// whose tries found the guard record locked, and whose context then ends
// during a try (here waiting for the pool's one connection; in CI, a
// statement on a busy server), says that the record stayed locked, as
// when the context ends between tries (it said only "context deadline
// exceeded").
func TestAQuarantineCutDuringATrySaysTheRecordStayedLocked(t *testing.T) {
	t.Parallel()
	s, db, dsn := guarded(t)
	db.SetMaxOpenConns(1)
	stuck, err := openDB(t, dsn).Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Rollback() //nolint:errcheck // nothing was written
	var hold int64
	if err := stuck.QueryRow(`SELECT hold_until FROM leadership_guard WHERE id = 1 LOCK IN SHARE MODE`).Scan(&hold); err != nil {
		t.Fatal(err)
	}
	quarantined := make(chan error, 1)
	go func() {
		qctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		_, err := s.Quarantine(qctx, time.Minute)
		quarantined <- err
	}()
	time.Sleep(2 * time.Second)                // the tries find the record locked (2 s: also on a loaded server)
	conn, err := db.Conn(context.Background()) // the pool's one connection, between two tries
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := <-quarantined; err == nil || !strings.Contains(err.Error(), "stayed locked") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Quarantine cut while waiting for a connection, after tries that found the record locked = %v, want an error saying it stayed locked, wrapping the context's", err)
	}
}

// TestAQuarantineWaitingForTheGuardHoldsNoAcquireUp: acquires take a
// shared lock on the guard record just before they commit, and InnoDB
// queues a shared lock behind a waiting exclusive one; so a Quarantine
// that waited for the record, held by a transaction that does not end (a
// process of statement mode stopped between its last two statements),
// would hold up every acquire of the schema behind it. Quarantine takes
// the record without waiting (FOR UPDATE NOWAIT) and tries again instead,
// until its context ends, while acquires go on; once the record is free it
// succeeds.
func TestAQuarantineWaitingForTheGuardHoldsNoAcquireUp(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		s, _, dsn := guarded(t, opts...)
		ctx := context.Background()
		acquire(t, s, "warm", "a", 0, time.Minute)
		other := newStore(t, openDB(t, dsn), opts...)
		acquire(t, other, "warm-other", "b", 0, time.Minute) // connected, and the schema read: the acquire below is one statement
		stuck, err := openDB(t, dsn).Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer stuck.Rollback() //nolint:errcheck // ended below
		var hold int64
		if err := stuck.QueryRow(`SELECT hold_until FROM leadership_guard WHERE id = 1 LOCK IN SHARE MODE`).Scan(&hold); err != nil {
			t.Fatal(err)
		}
		quarantined := make(chan error, 1)
		go func() {
			qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			_, err := s.Quarantine(qctx, time.Minute)
			quarantined <- err
		}()
		time.Sleep(300 * time.Millisecond) // the quarantine is trying
		start := time.Now()
		res := acquire(t, other, "other", "b", 0, time.Minute)
		// Held up behind the quarantine, it would wait for the
		// quarantine's end, 2.7 s on.
		if took := time.Since(start); !res.Acquired || took > 1500*time.Millisecond {
			t.Errorf("an acquire while a Quarantine waited for the guard record = %+v after %v, want acquired at once", res, took)
		}
		if err := <-quarantined; err == nil || !strings.Contains(err.Error(), "locked") {
			t.Errorf("Quarantine while a transaction kept the guard record locked = %v, want an error saying it stayed locked", err)
		}
		if err := stuck.Rollback(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Quarantine(ctx, time.Minute); err != nil {
			t.Fatalf("Quarantine once the record is free: %v", err)
		}
	})
}
