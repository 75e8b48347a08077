package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/batchtest"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/internal/testkit/tickstest"
	"github.com/dbflag/leadership/postgres"
)

// TestBatchedAttemptsKeepEveryRule sends the attempts of many flags of two
// stores at once, so that they travel in batches, and checks every rule of
// the contract per row: first acquisitions win at version 1, a second
// process loses each name and learns its holder, renewals keep the
// version, two requests of one store for one name in one burst make one
// winner, and takeovers after expiry increase it by
// one.
func TestBatchedAttemptsKeepEveryRule(t *testing.T) {
	t.Parallel()
	checkBatchedAttempts(t, migrated(t, schemaDSN(t, testdb.Postgres(t))))
}

// TestBatchedAttemptsThroughPgBouncer is the same through PgBouncer in
// transaction mode with the simple protocol, where a batch is one
// multi-statement query.
func TestBatchedAttemptsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	checkBatchedAttempts(t, bouncer(t, "simple_protocol"))
}

// checkBatchedAttempts and checkNamesThatNeedQuoting take the DSN of a
// migrated schema: never migrate through PgBouncer (bouncer migrates over
// the direct connection), where golang-migrate's advisory lock can be left
// held on a pooled server session and block every later Migrate.
func checkBatchedAttempts(t *testing.T, dsn string) {
	t.Helper()
	a, b := newStore(t, newPool(t, dsn)), newStore(t, newPool(t, dsn))
	batchtest.CheckRules(t, a, b, "batch-"+randomHex(), b.BatchStats)
}

// TestLoneAttemptSkipsTheHop checks that an attempt that finds nothing in
// flight is sent from its caller's goroutine (a follower woken by a
// release, a lone flag), and that a burst of concurrent ones still travels
// in batches.
func TestLoneAttemptSkipsTheHop(t *testing.T) {
	t.Parallel()
	s := newStore(t, newPool(t, schemaDSN(t, testdb.Postgres(t))))
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const lone = 20
	for i := range lone {
		res, err := s.Acquire(ctx, leadership.Request{Name: "lone", Holder: "a", Version: int64(min(i, 1)), Lease: time.Minute})
		if err != nil || !res.Acquired || res.Version != 1 {
			t.Fatalf("attempt %d = %+v, %v; want acquired at version 1", i, res, err)
		}
	}
	batches, statements := s.BatchStats()
	if alone := s.AloneBatches(); alone != lone || batches != lone || statements != lone {
		t.Fatalf("%d lone attempts: %d batches sent from the caller's goroutine, %d batches, %d statements; want %d of each", lone, alone, batches, statements, lone)
	}
	const n = 300
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("burst-%03d", i)
			if res, err := s.Acquire(ctx, leadership.Request{Name: name, Holder: "a", Lease: time.Minute}); err != nil || !res.Acquired {
				t.Errorf("acquire %s = %+v, %v", name, res, err)
			}
		})
	}
	wg.Wait()
	b2, s2 := s.BatchStats()
	if s2-statements != n || b2-batches >= n {
		t.Fatalf("a burst of %d attempts: %d statements in %d batches; want %d statements in fewer batches", n, s2-statements, b2-batches, n)
	}
	t.Logf("burst: %d statements in %d batches, %d of all batches sent from the caller's goroutine", s2-statements, b2-batches, s.AloneBatches())
}

// TestLoneAttemptHonoursCancellation blocks a lone attempt (sent from its
// caller's goroutine) on the row lock of a fenced transaction and cancels
// its context: Acquire must return at once, as a queued attempt does, not
// when the lock is released.
func TestLoneAttemptHonoursCancellation(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	s := newStore(t, newPool(t, dsn))
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(ctx, leadership.Request{Name: "locked", Holder: "a", Lease: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	tx, err := newPool(t, dsn).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // releases the lock
	if _, err := tx.Exec(ctx, `SELECT FROM leadership_flags WHERE name = 'locked' FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 4*time.Second) // the deadline ends the test if cancellation is ignored
	defer cancel()
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err = s.Acquire(actx, leadership.Request{Name: "locked", Holder: "a", Version: res.Version, Lease: time.Minute})
	if took := time.Since(start); err == nil || took > 2*time.Second {
		t.Fatalf("renewal blocked on a row lock, cancelled after 200ms (deadline 4s): returned after %v with error %v; want an error at once", took, err)
	}
	if s.AloneBatches() != 2 {
		t.Fatalf("%d batches sent from the caller's goroutine, want 2 (the test covers the lone path)", s.AloneBatches())
	}
}

// TestOneStatementDecidesNamesThatNeedQuoting acquires, then renews,
// flags whose names need quoting in an array literal, in JSON or in SQL
// (quotes, backslashes, braces, commas, spaces, NULL, line and paragraph
// separators, characters beyond the BMP), all in one statement: every
// renewal must find its own held version by name.
func TestOneStatementDecidesNamesThatNeedQuoting(t *testing.T) {
	t.Parallel()
	checkNamesThatNeedQuoting(t, migrated(t, schemaDSN(t, testdb.Postgres(t))), "") // a schema of its own: the names as they are
}

// TestOneStatementDecidesNamesThatNeedQuotingThroughPgBouncer is the same
// through PgBouncer with the simple protocol, where the arrays and the
// JSON travel as text literals.
func TestOneStatementDecidesNamesThatNeedQuotingThroughPgBouncer(t *testing.T) {
	t.Parallel()
	checkNamesThatNeedQuoting(t, bouncer(t, "simple_protocol"), randomHex()) // a shared schema: names of its own
}

func checkNamesThatNeedQuoting(t *testing.T, dsn, prefix string) {
	t.Helper()
	s := newStore(t, newPool(t, dsn))
	batchtest.CheckNamesThatNeedQuoting(t, s.AcquireTogether, prefix)
}

// TestARowAtTheLargestVersionFailsAloneInItsBatch: a row at version
// 2^63−1 can start no new term, and its attempt fails alone (issue 30),
// where the statement deciding its batch once failed whole with "bigint
// out of range", failing every other flag in it.
func TestARowAtTheLargestVersionFailsAloneInItsBatch(t *testing.T) {
	t.Parallel()
	pool := newPool(t, schemaDSN(t, testdb.Postgres(t)))
	s := newStore(t, pool)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	batchtest.CheckPoisonedNeighbour(t, s, s.AcquireTogether, func(name string, version int64) {
		if _, err := pool.Exec(context.Background(), `UPDATE leadership_flags SET version = $2 WHERE name = $1`, name, version); err != nil {
			t.Fatal(err)
		}
	}, "")
}

// migrated applies the schema over dsn, a direct connection, and returns it.
func migrated(t *testing.T, dsn string) string {
	t.Helper()
	if err := newStore(t, newPool(t, dsn)).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dsn
}

// BenchmarkCloseMany closes every flag of a process at once, as a service
// does at shutdown, and times until each is released and each follower in
// another process has taken over (batchtest.BenchmarkCloseMany), on pools
// of postgres.Open: one flag, and 64 with their releases sent one by one
// (as before they were batched) and in batches (as shipped).
func BenchmarkCloseMany(b *testing.B) {
	dsn := schemaDSN(b, testdb.Postgres(b))
	for _, c := range closeManyCases {
		b.Run(c.name, func(b *testing.B) {
			batchtest.BenchmarkCloseMany(b, c.flags, func() leadership.Store {
				pool, err := postgres.Open(context.Background(), dsn)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(pool.Close)
				s := newStore(b, pool)
				if err := s.Migrate(context.Background()); err != nil {
					b.Fatal(err)
				}
				if c.oneByOne {
					s.SetReleaseOneByOne()
				}
				return s
			}, "close-"+randomHex())
		})
	}
}

// closeManyCases are the cases of BenchmarkCloseMany.
var closeManyCases = []struct {
	name     string
	flags    int
	oneByOne bool
}{{"flags=1", 1, false}, {"flags=64/release=one-by-one", 64, true}, {"flags=64/release=batched", 64, false}}

// TestHoldersOfOneStoreRenewInFewBatches checks that the holders of the
// flags of one Store renew at shared ticks, sending their renewals in a
// few batches per renew interval (tickstest).
func TestHoldersOfOneStoreRenewInFewBatches(t *testing.T) {
	t.Parallel()
	s := newStore(t, newPool(t, schemaDSN(t, testdb.Postgres(t))))
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	tickstest.HoldersRenewInFewBatches(t, s, "tick-"+randomHex(), s.BatchStats)
}

// TestReleasesSentTogetherKeepEveryRule sends releases as one statement
// and checks each by the rules of a release alone (batchtest).
func TestReleasesSentTogetherKeepEveryRule(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	s, other := newStore(t, newPool(t, dsn)), newStore(t, newPool(t, dsn))
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	batchtest.CheckReleaseRules(t, s, other, s.ReleaseTogether, "")
}

// TestClosingManyFlagsAtOnceReleasesThemTogether closes the 64 flags of a
// process at once: their releases travel in a few statements, and each
// follower in another process is woken by its row's NOTIFY (batchtest).
func TestClosingManyFlagsAtOnceReleasesThemTogether(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	a, b := newStore(t, newPool(t, dsn)), newStore(t, newPool(t, dsn))
	if err := a.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	batchtest.CheckCloseMany(t, a, b, "close", a.ReleaseStats)
}
