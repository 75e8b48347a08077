package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/batchtest"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/postgres"
	"github.com/dbflag/leadership/storetest"
)

// newIncarnation empties the unlogged incarnation table of the pool's
// schema, as crash recovery or the promotion of a standby does, without
// losing any commit.
func newIncarnation(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `TRUNCATE leadership_incarnation`); err != nil {
		t.Fatal(err)
	}
}

func acquire(t testing.TB, s *postgres.Store, name, holder string, version int64, lease time.Duration) leadership.Result {
	t.Helper()
	res, err := s.Acquire(context.Background(), leadership.Request{Name: name, Holder: holder, Version: version, Lease: lease})
	if err != nil {
		t.Fatalf("acquire %s by %s: %v", name, holder, err)
	}
	return res
}

// TestGuardHoldsTakeoversAfterANewIncarnation walks the failover guard's
// rules on the real server: after a new incarnation, a live holder renews
// at once, while a takeover of a released row and a first acquisition of a
// name wait for the hold (one longest lease) and then get versions above
// the floor, the database clock in microseconds.
func TestGuardHoldsTakeoversAfterANewIncarnation(t *testing.T) {
	t.Parallel()
	pool := newPool(t, schemaDSN(t, testdb.Postgres(t)))
	s := newStore(t, pool)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	const lease = 2 * time.Second
	live, freed := "live", "freed"
	// A fresh schema holds nothing back.
	if res := acquire(t, s, live, "a", 0, lease); !res.Acquired || res.Version != 1 {
		t.Fatalf("first acquisition on a fresh schema = %+v, want version 1 at once", res)
	}
	if res := acquire(t, s, freed, "b", 0, lease); !res.Acquired || res.Version != 1 {
		t.Fatalf("first acquisition on a fresh schema = %+v, want version 1 at once", res)
	}
	if ok, err := s.Release(context.Background(), freed, "b", 1); err != nil || !ok {
		t.Fatalf("release = %v, %v", ok, err)
	}

	newIncarnation(t, pool)
	renewed := acquire(t, s, live, "a", 1, lease)
	if !renewed.Acquired || renewed.Version != 1 {
		t.Fatalf("renewal by the live holder after a new incarnation = %+v, want renewed at once, version 1", renewed)
	}
	until, now, err := s.QuarantinedUntil(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if hold := until.Sub(now); hold < lease/2 || hold > lease {
		t.Fatalf("hold after a new incarnation ends in %v, want about one lease (%v)", hold, lease)
	}
	floor := renewed.Now.UnixMicro()
	for _, name := range []string{freed, "new-name"} {
		res := acquire(t, s, name, "c", 0, lease)
		if res.Acquired {
			t.Fatalf("acquisition of %s during the hold = %+v, want refused", name, res)
		}
		if res.ExpiresAt.Before(until) {
			t.Errorf("a loser of %s was told the flag frees at %v, before the hold ends at %v", name, res.ExpiresAt, until)
		}
	}
	time.Sleep(time.Until(time.Now().Add(until.Sub(now))) + 50*time.Millisecond)
	for _, name := range []string{freed, "new-name"} {
		res := acquire(t, s, name, "c", 0, lease)
		if !res.Acquired || res.Version < floor {
			t.Fatalf("acquisition of %s after the hold = %+v, want a version at or above the floor %d", name, res, floor)
		}
	}
}

// TestGuardRefusesAnExpiredOwnTermDuringTheHold: the row of a holder that
// stopped renewing may hide a newer term that the failover lost, so while
// the hold lasts even its own holder cannot renew an expired term.
func TestGuardRefusesAnExpiredOwnTermDuringTheHold(t *testing.T) {
	t.Parallel()
	pool := newPool(t, schemaDSN(t, testdb.Postgres(t)))
	s := newStore(t, pool)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A longer lease asked once before makes the hold longer than the
	// short term below.
	acquire(t, s, "long", "x", 0, 3*time.Second)
	if res := acquire(t, s, "short", "a", 0, 200*time.Millisecond); !res.Acquired {
		t.Fatalf("acquire = %+v", res)
	}
	time.Sleep(300 * time.Millisecond)
	newIncarnation(t, pool)
	if res := acquire(t, s, "short", "a", 1, 200*time.Millisecond); res.Acquired {
		t.Fatalf("renewal of an expired own term during the hold = %+v, want refused", res)
	}
	until, now, err := s.QuarantinedUntil(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if hold := until.Sub(now); hold < time.Second { // 3 s less the statements since; a hold of the 200 ms lease is long over
		t.Fatalf("hold after a 200 ms request ends in %v, want the longest lease asked before (3 s)", hold)
	}
}

// TestQuarantineNeverShortens: an operator's hold blocks takeovers and
// first acquisitions, a shorter one never shortens it, holders renew.
func TestQuarantineNeverShortens(t *testing.T) {
	t.Parallel()
	pool := newPool(t, schemaDSN(t, testdb.Postgres(t)))
	s := newStore(t, pool)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	acquire(t, s, "held", "a", 0, 5*time.Second) // unexpired at its renewal below, also on a loaded server
	if _, err := s.Quarantine(context.Background(), 0); !errors.Is(err, leadership.ErrInvalidArgument) {
		t.Fatalf("Quarantine(0) = %v, want ErrInvalidArgument", err)
	}
	long, err := s.Quarantine(context.Background(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	short, err := s.Quarantine(context.Background(), time.Second)
	if err != nil || !short.Equal(long) {
		t.Fatalf("Quarantine(1s) after Quarantine(1m) = %v, %v; want the longer end %v", short, err, long)
	}
	if res := acquire(t, s, "held", "a", 1, time.Second); !res.Acquired {
		t.Fatalf("renewal during a quarantine = %+v, want renewed", res)
	}
	if res := acquire(t, s, "other", "b", 0, time.Second); res.Acquired || res.ExpiresAt.Before(long) {
		t.Fatalf("first acquisition during a quarantine = %+v, want refused until %v", res, long)
	}
}

// TestReadOnlyConnectionIsDroppedAndTheFlagRecovers: a connection to a
// server that takes no writes (here the first of the pool, made read-only
// as a demoted primary's would be) fails the attempt with the fix named,
// never raises the flag, and is closed, so that the pool dials again and
// the next attempt succeeds.
func TestReadOnlyConnectionIsDroppedAndTheFlagRecovers(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	if err := newStore(t, newPool(t, dsn)).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	var dialed atomic.Int32
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if dialed.Add(1) == 1 {
			_, err := c.Exec(ctx, `SET default_transaction_read_only = on`)
			return err
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := newStore(t, pool)
	_, err = s.Acquire(context.Background(), leadership.Request{Name: "ro", Holder: "a", Lease: time.Second})
	if err == nil || !strings.Contains(err.Error(), "target_session_attrs=read-write") {
		t.Fatalf("attempt on a read-only connection = %v, want an error naming target_session_attrs=read-write", err)
	}
	res := acquire(t, s, "ro", "a", 0, time.Second)
	if !res.Acquired || dialed.Load() != 2 {
		t.Fatalf("attempt after the read-only connection = %+v after %d dials, want acquired on a new connection", res, dialed.Load())
	}
}

// TestGuardConformance runs the failover guard's suite, each case on a
// schema of its own; a new incarnation is an emptied incarnation table.
func TestGuardConformance(t *testing.T) {
	t.Parallel()
	base := testdb.Postgres(t)
	storetest.RunGuard(t, func(t testing.TB) (storetest.Open, func(testing.TB)) {
		dsn := schemaDSN(t, base)
		open := func(t testing.TB) leadership.Store { return newStore(t, newPool(t, dsn)) }
		return open, func(t testing.TB) { newIncarnation(t, newPool(t, dsn)) }
	})
}

// TestGuardRulesHoldForFlagsDecidedInOneStatement walks the guard's rules
// with the requests of many flags in one batch, so that each run of
// distinct names is decided by one statement: after a new incarnation the
// live holder renews at once, takeovers and first acquisitions in the same
// statement are refused for the hold, which lasts the longest lease of
// the statement's rows, and then get versions at or above the floor. Two
// requests for one name in one batch are decided one after the other.
func TestGuardRulesHoldForFlagsDecidedInOneStatement(t *testing.T) {
	t.Parallel()
	pool := newPool(t, schemaDSN(t, testdb.Postgres(t)))
	s := newStore(t, pool)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	batchtest.CheckGuardRules(t, s, s.AcquireTogether, func() { newIncarnation(t, pool) })
}

// TestNoNewTermStartsAfterQuarantineReturned: an acquire statement that
// read the guard before a quarantine and then waited for a flag's row lock
// (held by a fenced transaction) starts no term after Quarantine returned
// (issue 29): the quarantine waits for it. Alone, and in one statement
// with another name.
func TestNoNewTermStartsAfterQuarantineReturned(t *testing.T) {
	t.Parallel()
	base := testdb.Postgres(t)
	for _, together := range []bool{false, true} {
		t.Run(map[bool]string{false: "Alone", true: "InABatch"}[together], func(t *testing.T) {
			t.Parallel()
			dsn := schemaDSN(t, base)
			s, other := newStore(t, newPool(t, dsn)), newStore(t, newPool(t, dsn))
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			locks := newPool(t, dsn)
			batchtest.CheckQuarantineHoldsAWaitingTakeover(t, s, other, other.AcquireTogether, func(term leadership.Term) func() {
				tx, err := locks.Begin(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if err := postgres.Fence(context.Background(), tx, term); err != nil {
					t.Fatal(err)
				}
				return func() { _ = tx.Rollback(context.Background()) }
			}, together)
		})
	}
}
