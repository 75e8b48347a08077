package storetest

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// Fencing is what [RunFence] needs from a store's test: an adapter between
// the suite and the store's fenced transactions (its Fence and RunFenced
// functions, and its driver's transaction type), on the same database as
// the stores Open returns.
type Fencing struct {
	// Open opens a new store on the database, as for [Run].
	Open Open
	// Table creates an empty table of the test's own with two integer
	// columns, token and seq, and returns its name.
	Table func(t testing.TB) string
	// Begin begins a transaction on the database, on a connection pool of
	// its own (another "process" than the stores'), failing the test if
	// it cannot.
	Begin func(t testing.TB) FenceTx
	// RunFenced runs fn in a transaction fenced with leader by the store's
	// RunFenced function.
	RunFenced func(ctx context.Context, leader leadership.Leader, fn func(FenceTx) error) error
	// Retry is an error of the driver's type that the store's RunFenced
	// runs the transaction again for (a deadlock, a serialization
	// failure, a busy database).
	Retry error
	// OneWriter is true when a write takes a lock of the whole database
	// that every acquire waits for (SQLite): a transaction that wrote
	// holds every takeover off by itself, so no term can come between its
	// writes and a fence placed last, and the case that shows it on the
	// other stores is skipped.
	OneWriter bool
}

// FenceTx is one transaction of a [Fencing].
type FenceTx interface {
	// Fence fences the transaction with the store's Fence function.
	Fence(ctx context.Context, leader leadership.Leader) error
	// Insert inserts the row (token, seq) into table.
	Insert(ctx context.Context, table string, token, seq int64) error
	// Rows reads table's rows as (token, seq) pairs, ordered by both.
	Rows(ctx context.Context, table string) ([][2]int64, error)
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// RunFence checks a store's fenced transactions: a fenced transaction of
// the current term commits; one of a former term (evicted, expired and
// taken over) fails with [leadership.ErrNotLeader] and writes nothing; a
// takeover started while a fenced transaction is open commits only after
// it, and the new term sees its writes.
func RunFence(t *testing.T, f Fencing) {
	t.Helper()
	migrate(t, f.Open)
	s := f.Open(t)
	t.Run("FencedTxOfTheHolderCommits", func(t *testing.T) {
		t.Parallel()
		name, table := uniqueName(t), f.Table(t)
		res := acquire(t, s, name, "a", 0, 30*time.Second)
		term := leadership.Term{Name: name, Holder: "a", Version: res.Version}
		tx := begin(t, f)
		if err := tx.Fence(ctx(t), term); err != nil {
			t.Fatalf("Fence by the holder: %v", err)
		}
		insert(t, tx, table, res.Version, 1)
		if err := tx.Commit(ctx(t)); err != nil {
			t.Fatalf("Commit of a fenced transaction of the holder: %v", err)
		}
		if err := f.RunFenced(ctx(t), term, func(tx FenceTx) error {
			return tx.Insert(ctx(t), table, res.Version, 2)
		}); err != nil {
			t.Fatalf("RunFenced by the holder: %v", err)
		}
		if got, want := rows(t, f, table), [][2]int64{{res.Version, 1}, {res.Version, 2}}; !slices.Equal(got, want) {
			t.Fatalf("rows = %v, want %v", got, want)
		}
	})
	t.Run("FencedTxOfAnEvictedHolderFails", func(t *testing.T) {
		t.Parallel()
		name, table := uniqueName(t), f.Table(t)
		res := acquire(t, s, name, "a", 0, 30*time.Second)
		evict(t, s, name)
		// Evicted, and nobody has taken over yet (the term expires in
		// 30 s): the row no longer names a as holder.
		wantNotLeader(t, f, table, leadership.Term{Name: name, Holder: "a", Version: res.Version})
	})
	for _, evicted := range []bool{true, false} {
		how := map[bool]string{true: "Evicted", false: "Expired"}[evicted]
		t.Run("FencedTxOfAHolder"+how+"AndTakenOverFails", func(t *testing.T) {
			t.Parallel()
			name, table := uniqueName(t), f.Table(t)
			first := acquire(t, s, name, "a", 0, 300*time.Millisecond)
			if evicted {
				evict(t, s, name)
			}
			sleepUntilExpiry(first)
			next := acquire(t, f.Open(t), name, "b", 0, 30*time.Second)
			if !next.Acquired || next.Version != first.Version+1 {
				t.Fatalf("takeover by b = %+v, want acquired at version %d", next, first.Version+1)
			}
			wantNotLeader(t, f, table, leadership.Term{Name: name, Holder: "a", Version: first.Version})
			// Same holder name, former version: still a former term.
			if err := f.RunFenced(ctx(t), leadership.Term{Name: name, Holder: "b", Version: first.Version}, func(FenceTx) error { return nil }); !errors.Is(err, leadership.ErrNotLeader) {
				t.Fatalf("RunFenced with b and the former version = %v, want ErrNotLeader", err)
			}
			if err := f.RunFenced(ctx(t), leadership.Term{Name: name, Holder: "b", Version: next.Version}, func(tx FenceTx) error {
				return tx.Insert(ctx(t), table, next.Version, 1)
			}); err != nil {
				t.Fatalf("RunFenced by the new holder: %v", err)
			}
			if got, want := rows(t, f, table), [][2]int64{{next.Version, 1}}; !slices.Equal(got, want) {
				t.Fatalf("rows = %v, want %v", got, want)
			}
		})
	}
	t.Run("FencedTxOfAnExpiredTermNobodyTookCommits", func(t *testing.T) {
		t.Parallel()
		// Time plays no part: until another term starts, which it cannot
		// while the fenced transaction is open, the term's writes are the
		// last term's writes.
		name, table := uniqueName(t), f.Table(t)
		res := acquire(t, s, name, "a", 0, 100*time.Millisecond)
		sleepUntilExpiry(res)
		if err := f.RunFenced(ctx(t), leadership.Term{Name: name, Holder: "a", Version: res.Version}, func(tx FenceTx) error {
			return tx.Insert(ctx(t), table, res.Version, 1)
		}); err != nil {
			t.Fatalf("RunFenced of an expired term nobody took over: %v", err)
		}
	})
	t.Run("FenceWithAFlagFollowsItsTerm", func(t *testing.T) {
		t.Parallel()
		name, table := uniqueName(t), f.Table(t)
		connect(t, s)
		// Timeout 10 s: on SQLite every attempt needs the one write lock,
		// which TakeoverWaitsForTheFencedTx holds on purpose for over a
		// second (BEGIN IMMEDIATE), longer than a 1 s Timeout (Lease/5)
		// lets the first attempt wait.
		fl, err := leadership.NewFlag().Store(s).Name(name).Lease(30 * time.Second).Timeout(10 * time.Second).Migrate(false).Build(ctx(t))
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		defer fl.Close()
		if err := fl.Wait(ctx(t)); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		token, _ := fl.Token()
		if err := f.RunFenced(ctx(t), fl, func(tx FenceTx) error { return tx.Insert(ctx(t), table, token, 1) }); err != nil {
			t.Fatalf("RunFenced with a raised flag: %v", err)
		}
		if err := fl.Close(); err != nil {
			// Close lowers the flag before it releases the row; the
			// release may time out while other tests hold the write lock
			// (SQLite has one writer), and the term then just expires.
			t.Logf("Close: %v", err)
		}
		ran := false
		if err := f.RunFenced(ctx(t), fl, func(FenceTx) error { ran = true; return nil }); !errors.Is(err, leadership.ErrNotLeader) || ran {
			t.Fatalf("RunFenced with a closed flag = %v (fn ran: %v), want ErrNotLeader before fn", err, ran)
		}
		if got, want := rows(t, f, table), [][2]int64{{token, 1}}; !slices.Equal(got, want) {
			t.Fatalf("rows = %v, want %v", got, want)
		}
	})
	t.Run("AFenceLastCoversTheWorkOnlyWithTheTermTakenBeforeIt", func(t *testing.T) {
		if f.OneWriter {
			t.Skip("a write holds every takeover off until the transaction ends: no term can come between")
		}
		t.Parallel()
		fenceLast(t, f)
	})
	t.Run("RunFencedRunsTheTxAgainWhenTheDatabaseAsks", func(t *testing.T) {
		t.Parallel()
		name, table := uniqueName(t), f.Table(t)
		res := acquire(t, s, name, "a", 0, 30*time.Second)
		term := leadership.Term{Name: name, Holder: "a", Version: res.Version}
		calls := 0
		err := f.RunFenced(ctx(t), term, func(tx FenceTx) error {
			calls++
			if err := tx.Insert(ctx(t), table, res.Version, int64(calls)); err != nil {
				return err
			}
			if calls < 3 {
				return f.Retry
			}
			return nil
		})
		if err != nil || calls != 3 {
			t.Fatalf("RunFenced failing twice with %v = %v after %d calls, want success after 3", f.Retry, err, calls)
		}
		// The failed attempts were rolled back; only the third committed.
		if got, want := rows(t, f, table), [][2]int64{{res.Version, 3}}; !slices.Equal(got, want) {
			t.Fatalf("rows = %v, want %v", got, want)
		}
		calls = 0
		boom := errors.New("boom")
		if err := f.RunFenced(ctx(t), term, func(FenceTx) error { calls++; return boom }); !errors.Is(err, boom) || calls != 1 {
			t.Fatalf("RunFenced with an error of the job = %v after %d calls, want it once", err, calls)
		}
		calls = 0
		if err := f.RunFenced(ctx(t), term, func(FenceTx) error { calls++; return f.Retry }); !errors.Is(err, f.Retry) || calls != 5 {
			t.Fatalf("RunFenced always asked to retry = %v after %d calls, want the error after 5", err, calls)
		}
	})
	t.Run("TakeoverWaitsForTheFencedTx", func(t *testing.T) {
		t.Parallel()
		name, table := uniqueName(t), f.Table(t)
		other := f.Open(t)
		connect(t, other)
		first := acquire(t, s, name, "a", 0, 300*time.Millisecond)
		tx := begin(t, f)
		if err := tx.Fence(ctx(t), leadership.Term{Name: name, Holder: "a", Version: first.Version}); err != nil {
			t.Fatalf("Fence by the holder: %v", err)
		}
		// Nothing written yet: the fence alone must hold the takeover off
		// (on SQLite, a write would take the write lock by itself).
		sleepUntilExpiry(first)
		type outcome struct {
			res leadership.Result
			err error
		}
		took := make(chan outcome, 1)
		go func() {
			res, err := other.Acquire(ctx(t), leadership.Request{Name: name, Holder: "b", Lease: 30 * time.Second})
			took <- outcome{res, err}
		}()
		select {
		case o := <-took:
			t.Fatalf("a takeover committed while a fenced transaction of the former term was open: %+v, %v", o.res, o.err)
		case <-time.After(time.Second):
		}
		insert(t, tx, table, first.Version, 1)
		insert(t, tx, table, first.Version, 2)
		if err := tx.Commit(ctx(t)); err != nil {
			t.Fatalf("Commit of the fenced transaction, its term expired but not taken over: %v", err)
		}
		o := <-took
		if o.err != nil || !o.res.Acquired || o.res.Version != first.Version+1 {
			t.Fatalf("takeover after the fenced transaction = %+v, %v; want acquired at version %d", o.res, o.err, first.Version+1)
		}
		var seen [][2]int64
		if err := f.RunFenced(ctx(t), leadership.Term{Name: name, Holder: "b", Version: o.res.Version}, func(tx FenceTx) error {
			var err error
			seen, err = tx.Rows(ctx(t), table)
			return err
		}); err != nil {
			t.Fatalf("first fenced transaction of the new term: %v", err)
		}
		if want := [][2]int64{{first.Version, 1}, {first.Version, 2}}; !slices.Equal(seen, want) {
			t.Fatalf("the new term's first fenced transaction saw %v, want the former term's writes %v", seen, want)
		}
	})
}

// wantNotLeader checks that transactions fenced with the former term fail
// with ErrNotLeader and leave table empty: a fence after a write, rolled
// back, and RunFenced, whose function must not run.
func wantNotLeader(t *testing.T, f Fencing, table string, former leadership.Term) {
	t.Helper()
	tx := begin(t, f)
	insert(t, tx, table, former.Version, 1)
	if err := tx.Fence(ctx(t), former); !errors.Is(err, leadership.ErrNotLeader) {
		t.Fatalf("Fence of the former term %+v = %v, want ErrNotLeader", former, err)
	}
	if err := tx.Rollback(ctx(t)); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	ran := false
	err := f.RunFenced(ctx(t), former, func(tx FenceTx) error {
		ran = true
		return tx.Insert(ctx(t), table, former.Version, 2)
	})
	if !errors.Is(err, leadership.ErrNotLeader) || ran {
		t.Fatalf("RunFenced of the former term = %v (fn ran: %v), want ErrNotLeader before fn", err, ran)
	}
	if got := rows(t, f, table); len(got) != 0 {
		t.Fatalf("a former term's fenced transactions wrote %v", got)
	}
}

// begin begins a transaction of f and rolls it back when the test ends,
// unless it ended before: a test that fails with a transaction open must
// not leave it holding locks, nor its pool waiting for it.
func begin(t testing.TB, f Fencing) FenceTx {
	t.Helper()
	tx := f.Begin(t)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

func evict(t testing.TB, s leadership.Store, name string) {
	t.Helper()
	if ok, err := s.Evict(ctx(t), name); err != nil || !ok {
		t.Fatalf("Evict(%q) = %v, %v; want true", name, ok, err)
	}
}

func insert(t testing.TB, tx FenceTx, table string, token, seq int64) {
	t.Helper()
	if err := tx.Insert(ctx(t), table, token, seq); err != nil {
		t.Fatalf("insert (%d, %d): %v", token, seq, err)
	}
}

// rows reads table in a transaction of its own.
func rows(t testing.TB, f Fencing, table string) [][2]int64 {
	t.Helper()
	tx := begin(t, f)
	defer tx.Rollback(ctx(t)) //nolint:errcheck // read only
	got, err := tx.Rows(ctx(t), table)
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return got
}

// fenceLast is the case of a fence placed last (issue 29): A leads at
// term 1 and writes in transactions not fenced yet; B takes over (term 2)
// and commits a fenced write; A leads again (term 3). A fence with the
// Term A kept from term 1 refuses the transaction, while a fence with A's
// flag checks term 3, passes, and commits term 1's write after term 2's:
// the flag's term is asked at the moment of the fence.
func fenceLast(t *testing.T, f Fencing) {
	name, table := uniqueName(t), f.Table(t)
	a, b := f.Open(t), f.Open(t)
	connect(t, a)
	var stepDown atomic.Bool
	fl, err := leadership.NewFlag().Store(a).Name(name).Process("a").Lease(3 * time.Second).Migrate(false).
		Precheck(func(context.Context) error {
			if stepDown.Load() {
				return errors.New("stepping down (test)")
			}
			return nil
		}).Build(ctx(t))
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	defer fl.Close()
	if err := fl.Wait(ctx(t)); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	kept, _ := fl.Term()
	// The job's work in term 1, in two transactions without a fence yet.
	withTerm, withFlag := begin(t, f), begin(t, f)
	insert(t, withTerm, table, kept.Version, 1)
	insert(t, withFlag, table, kept.Version, 2)

	// A steps down (its Precheck vetoes the next attempt: it lowers and
	// releases), B takes over and commits a fenced write, then releases.
	stepDown.Store(true)
	if !trueWithin(func() bool { return !fl.Raised() }, 10*time.Second) {
		t.Fatal("A did not step down")
	}
	var second leadership.Result
	if !trueWithin(func() bool {
		second = acquire(t, b, name, "b", 0, 30*time.Second)
		return second.Acquired
	}, 10*time.Second) {
		t.Fatalf("B did not take over after A released: %+v", second)
	}
	if second.Version <= kept.Version {
		t.Fatalf("B's term %d is not after A's %d", second.Version, kept.Version)
	}
	term2 := leadership.Term{Name: name, Holder: "b", Version: second.Version}
	if err := f.RunFenced(ctx(t), term2, func(tx FenceTx) error { return tx.Insert(ctx(t), table, term2.Version, 1) }); err != nil {
		t.Fatalf("B's fenced write: %v", err)
	}
	if !release(t, b, name, "b", term2.Version) {
		t.Fatal("B's release failed")
	}

	// A leads again, at term 3.
	stepDown.Store(false)
	if err := fl.Wait(ctx(t)); err != nil {
		t.Fatalf("Wait for A's second term: %v", err)
	}
	third, _ := fl.Term()
	if third.Version <= term2.Version {
		t.Fatalf("A's second term %d is not after B's %d", third.Version, term2.Version)
	}

	// The fence placed last, with the Term taken before the work: refused.
	if err := withTerm.Fence(ctx(t), kept); !errors.Is(err, leadership.ErrNotLeader) {
		t.Fatalf("a fence placed last with the Term kept from term %d, in term %d = %v; want ErrNotLeader", kept.Version, third.Version, err)
	}
	if err := withTerm.Rollback(ctx(t)); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	// With the flag: the fence checks term 3, passes, and term 1's write
	// commits after term 2's fenced write. This is what docs/fencing.md and
	// the Fence docs warn of; if it ever fails, they need changing.
	if err := withFlag.Fence(ctx(t), fl); err != nil {
		t.Fatalf("a fence placed last with the flag, in term %d = %v; want it to pass (it checks the term of the moment)", third.Version, err)
	}
	if err := withFlag.Commit(ctx(t)); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if got, want := rows(t, f, table), [][2]int64{{kept.Version, 2}, {term2.Version, 1}}; !slices.Equal(got, want) {
		t.Fatalf("rows = %v, want term 1's write (with the flag) committed after term 2's: %v", got, want)
	}
}
