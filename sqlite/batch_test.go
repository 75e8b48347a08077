package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
	"github.com/dbflag/leadership/internal/testkit/batchtest"
	"github.com/dbflag/leadership/internal/testkit/tickstest"
	"github.com/dbflag/leadership/sqlite"
)

func openFile(t testing.TB) *sqlite.Store {
	t.Helper()
	s, _ := openFileAt(t)
	return s
}

// openFileAt opens a new database file and returns a migrated store on it
// and the file's path.
func openFileAt(t testing.TB) (*sqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flags.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s := newStore(t, db)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, path
}

// walFrames is the number of frames the -wal file of the database at path
// can hold: the frames appended so far, while no checkpoint has reset it.
func walFrames(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	const header, frameHeader, page = 32, 24, 4096
	return max(fi.Size()-header, 0) / (frameHeader + page)
}

// TestConcurrentAttemptsOfOneStoreShareTransactions renews 64 flags of one
// store at once, five times: the renewals share transactions, which the
// database file shows (a commit appends the pages it changed to the -wal
// file, as frames: a transaction each would append at least one frame per
// renewal, 320), and each renews its own term.
func TestConcurrentAttemptsOfOneStoreShareTransactions(t *testing.T) {
	t.Parallel()
	s, path := openFileAt(t)
	names := make([]string, 64)
	for i := range names {
		names[i] = fmt.Sprintf("flag-%02d", i)
	}
	terms := batchtest.AcquireAll(t, s, names)
	b0, n0 := s.BatchStats()
	f0 := walFrames(t, path)
	batchtest.RenewAll(t, s, names, terms, 5)
	b1, n1 := s.BatchStats()
	frames := walFrames(t, path) - f0
	t.Logf("%d renewals in %d transactions, appending %d frames to the -wal file", n1-n0, b1-b0, frames)
	if frames > 160 {
		t.Errorf("320 renewals appended %d frames to the -wal file; sharing transactions, they should append at most 160", frames)
	}
}

// BenchmarkConcurrentRenewals renews 64 flags of one store at once, each
// from its own goroutine, with batches (the default) and without (one
// transaction per renewal): the time per renewal.
func BenchmarkConcurrentRenewals(b *testing.B) {
	for _, max := range []int{1, 512} {
		b.Run(fmt.Sprintf("maxBatch=%d", max), func(b *testing.B) {
			s := openFile(b)
			s.SetMaxBatch(max)
			names := make([]string, 64)
			for i := range names {
				names[i] = fmt.Sprintf("flag-%02d", i)
			}
			terms := batchtest.AcquireAll(b, s, names)
			b.ResetTimer()
			batchtest.RenewAll(b, s, names, terms, max1(b.N/len(names)))
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(max1(b.N/len(names))*len(names)), "ns/renewal")
		})
	}
}

func max1(n int) int { return max(n, 1) }

// TestAFailedStatementRollsItsBatchBack renews seventeen flags of one
// store in one batch (a renewal of another flag, sent alone, waits on the
// write lock meanwhile, so the others queue behind it), one of which a
// trigger of the test makes fail. Every renewal of that batch gets the
// error and none of them takes effect, the ones run before the failed
// statement included; the transaction is rolled back, so the store's next
// renewals of the same flags succeed at once, instead of meeting a
// connection left inside a transaction that holds the write lock.
func TestAFailedStatementRollsItsBatchBack(t *testing.T) {
	t.Parallel()
	s, path := openFileAt(t)
	ctx := context.Background()
	names := []string{"alone"}
	for i := range 8 {
		names = append(names, fmt.Sprintf("a-%d", i), fmt.Sprintf("z-%d", i))
	}
	names = append(names, "m-poison")
	terms := batchtest.AcquireAll(t, s, names)

	other, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Exec(`CREATE TRIGGER poison BEFORE UPDATE ON leadership_flags
WHEN NEW.name = 'm-poison' AND NEW.holder <> '' BEGIN SELECT RAISE(ABORT, 'poisoned by the test'); END`); err != nil {
		t.Fatal(err)
	}
	before, _, err := newStore(t, other).Flags(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	renew := func(i int) error {
		_, err := s.Acquire(ctx, leadership.Request{Name: names[i], Holder: "h", Version: terms[i].Version, Lease: time.Minute})
		return err
	}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	// Pauses long enough for the goroutines to get there, also on a
	// loaded machine.
	wg.Go(func() { errs[0] = renew(0) }) // sent alone, waits on the lock
	time.Sleep(500 * time.Millisecond)
	for i := 1; i < len(names); i++ {
		wg.Go(func() { errs[i] = renew(i) }) // queued behind it: one batch
	}
	time.Sleep(500 * time.Millisecond)
	if _, err := lock.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if errs[0] != nil {
		t.Fatalf("the renewal sent alone failed: %v", errs[0])
	}
	for i := 1; i < len(names); i++ {
		if errs[i] == nil {
			t.Errorf("%s renewed, in the batch with the failed statement", names[i])
		}
	}
	after, _, err := newStore(t, other).Flags(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range after {
		if r.Name != "alone" && !r.ExpiresAt.Equal(before[i].ExpiresAt) {
			t.Errorf("%s: expiry %v, was %v: a renewal of the failed batch took effect", r.Name, r.ExpiresAt, before[i].ExpiresAt)
		}
	}
	for i, n := range names[:len(names)-1] {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := s.Acquire(rctx, leadership.Request{Name: n, Holder: "h", Version: terms[i].Version, Lease: time.Minute})
		cancel()
		if err != nil || !res.Acquired {
			t.Fatalf("renewal of %s after the failed batch = %+v, %v", n, res, err)
		}
	}
}

// TestARowAtTheLargestVersionFailsAloneInItsBatch: a row at version
// 2^63−1 can start no new term, and its attempt fails alone (issue 30),
// where its batch's transaction once rolled back whole, failing every
// other flag in it.
func TestARowAtTheLargestVersionFailsAloneInItsBatch(t *testing.T) {
	t.Parallel()
	s, path := openFileAt(t)
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	batchtest.CheckPoisonedNeighbour(t, s, s.AcquireTogether, func(name string, version int64) {
		if _, err := db.Exec(`UPDATE leadership_flags SET version = ? WHERE name = ?`, version, name); err != nil {
			t.Fatal(err)
		}
	}, "")
}

// BenchmarkCloseMany closes every flag of a process at once, as a service
// does at shutdown, and times until each is released and each follower in
// another process (a store on a pool of its own, woken by its file
// watcher) has taken over (batchtest.BenchmarkCloseMany), on one database
// file: one flag, and 64 with their releases sent one by one (as before
// they were batched) and in batches (as shipped).
func BenchmarkCloseMany(b *testing.B) {
	for _, c := range []struct {
		name     string
		flags    int
		oneByOne bool
	}{{"flags=1", 1, false}, {"flags=64/release=one-by-one", 64, true}, {"flags=64/release=batched", 64, false}} {
		b.Run(c.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "flags.db")
			batchtest.BenchmarkCloseMany(b, c.flags, func() leadership.Store {
				db, err := sqlite.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { db.Close() })
				s := newStore(b, db)
				if err := s.Migrate(context.Background()); err != nil {
					b.Fatal(err)
				}
				if c.oneByOne {
					s.SetReleaseOneByOne()
				}
				return s
			}, "close")
		})
	}
}

// TestHoldersOfOneStoreRenewInFewTransactions checks that the holders of
// the flags of one Store renew at shared ticks, committing their renewals
// in a few transactions per renew interval (tickstest).
func TestHoldersOfOneStoreRenewInFewTransactions(t *testing.T) {
	t.Parallel()
	s := openFile(t)
	tickstest.HoldersRenewInFewBatches(t, s, "tick", s.BatchStats)
}

// TestABatchWhoseContextEndsAsItBeginsLeavesNoTransactionOpen sends a
// batch of two acquires, and one of two releases, with a deadline of
// 150 ms while another connection holds the write lock, and lets the lock
// go just before the deadline, until the batch's BEGIN IMMEDIATE has met
// the deadline 20 times: when it takes the lock as the deadline passes,
// the driver reports the context's end although the transaction began.
// The batch must end the transaction it may have begun: a connection
// returned to the pool inside it keeps the file's write lock, so that no
// other process can write until the store uses that connection again,
// and every use of it fails ("cannot start a transaction within a
// transaction").
func TestABatchWhoseContextEndsAsItBeginsLeavesNoTransactionOpen(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"acquires", "releases"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, path := openFileAt(t)
			bg := context.Background()
			other, err := sqlite.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			lock, err := other.Conn(bg)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Close()
			terms := batchtest.AcquireAll(t, s, []string{"a", "b"})
			for met, i := 0, 0; met < 20; i++ {
				if i == 200 {
					t.Skipf("the batch met its deadline in BEGIN %d times in %d tries", met, i)
				}
				if _, err := lock.ExecContext(bg, "BEGIN IMMEDIATE"); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
				done := make(chan error, 1)
				go func() {
					var err error
					if kind == "acquires" {
						_, err = s.AcquireTogether(ctx,
							leadership.Request{Name: "a", Holder: batchtest.Holder, Version: terms[0].Version, Lease: time.Minute},
							leadership.Request{Name: "b", Holder: batchtest.Holder, Version: terms[1].Version, Lease: time.Minute})
					} else {
						_, err = s.ReleaseTogether(ctx,
							sqlstore.Release{Name: "a", Holder: batchtest.Holder, Version: terms[0].Version + 1},
							sqlstore.Release{Name: "b", Holder: batchtest.Holder, Version: terms[1].Version + 1})
					}
					done <- err
				}()
				time.Sleep(time.Duration(135+i%15) * time.Millisecond)
				if _, err := lock.ExecContext(bg, "COMMIT"); err != nil {
					t.Fatal(err)
				}
				err := <-done
				cancel()
				if err != nil && strings.Contains(err.Error(), "begin a transaction") {
					met++
				}
				wctx, cancelWrite := context.WithTimeout(bg, time.Second)
				_, err = lock.ExecContext(wctx, "BEGIN IMMEDIATE")
				cancelWrite()
				if err != nil {
					t.Fatalf("try %d: another connection cannot take the write lock after the batch returned: %v", i, err)
				}
				if _, err := lock.ExecContext(bg, "ROLLBACK"); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(bg, 5*time.Second)
			defer cancel()
			if _, err := s.Acquire(ctx, leadership.Request{Name: "a", Holder: batchtest.Holder, Version: terms[0].Version, Lease: time.Minute}); err != nil {
				t.Fatalf("the store's next attempt failed: %v", err)
			}
		})
	}
}

// TestReleasesSentTogetherKeepEveryRule sends releases as one transaction
// and checks each by the rules of a release alone (batchtest).
func TestReleasesSentTogetherKeepEveryRule(t *testing.T) {
	t.Parallel()
	s, path := openFileAt(t)
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	batchtest.CheckReleaseRules(t, s, newStore(t, db), s.ReleaseTogether, "")
}

// TestClosingManyFlagsAtOnceReleasesThemTogether closes the 64 flags of a
// process at once: their releases share a few transactions, and each
// follower in another process (a store on a pool of its own) is woken by
// its file watcher (batchtest).
func TestClosingManyFlagsAtOnceReleasesThemTogether(t *testing.T) {
	t.Parallel()
	a, path := openFileAt(t)
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	batchtest.CheckCloseMany(t, a, newStore(t, db), "close", a.ReleaseStats)
}
