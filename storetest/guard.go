package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// Fresh opens stores on a schema (or database) of their own, empty and not shared with other tests
// (the guard record is schema-wide), and returns the Open for it and a function that makes the database
// start a new incarnation, as a crash recovery or a promotion would, without losing any commit.
type Fresh func(t testing.TB) (open Open, newIncarnation func(t testing.TB))

// RunGuard checks the failover guard of docs/failover.md on a store that implements leadership.Quarantiner.
//
// Each case runs on a schema of its own from fresh, with leases of one to
// three seconds, and judges time by the database clock that the store
// reports. A case waits for at most a few leases.
func RunGuard(t *testing.T, fresh Fresh) {
	t.Helper()
	t.Run("FreshSchemaAcquiresAtOnceAtVersionOne", func(t *testing.T) {
		t.Parallel()
		g := newGuardCase(t, fresh)
		res := acquire(t, g.s, "a-flag", "a", 0, time.Second)
		if !res.Acquired || res.Version != 1 {
			t.Fatalf("first acquisition on a fresh schema = %+v, want acquired at once at version 1", res)
		}
		if until, now := g.held(t); until.After(now) {
			t.Errorf("a fresh schema is held until %v (now %v), want no hold", until, now)
		}
	})
	t.Run("LiveHolderRenewsAtOnceAfterNewIncarnation", func(t *testing.T) {
		t.Parallel()
		g := newGuardCase(t, fresh)
		first := acquire(t, g.s, "a-flag", "a", 0, 5*time.Second) // outlasts a new store's connection on a loaded server
		g.newIncarnation(t)
		res := acquire(t, g.open(t), "a-flag", "a", first.Version, 5*time.Second)
		if !res.Acquired || res.Version != first.Version {
			t.Fatalf("renewal of an unexpired term after a new incarnation = %+v, want renewed at version %d", res, first.Version)
		}
		if until, now := g.held(t); !until.After(now) {
			t.Errorf("the new incarnation started no hold: held until %v, now %v", until, now)
		}
	})
	t.Run("NewTermsWaitForTheHoldAfterNewIncarnation", func(t *testing.T) {
		t.Parallel()
		g := newGuardCase(t, fresh)
		expired := acquire(t, g.s, "expired", "a", 0, time.Second)
		released := acquire(t, g.s, "released", "a", 0, 2*time.Second)
		if !release(t, g.s, "released", "a", released.Version) {
			t.Fatal("release of a held term failed")
		}
		sleepUntilExpiry(expired)
		g.newIncarnation(t)
		s := g.open(t)
		var losers []leadership.Result
		for _, name := range []string{"expired", "released", "new-name"} {
			res := acquire(t, s, name, "b", 0, time.Second)
			if res.Acquired {
				t.Fatalf("%s: a new term started at once after a new incarnation: %+v", name, res)
			}
			losers = append(losers, res)
		}
		floor := losers[0].Now.Add(-precision).UnixMicro() // the new incarnation's first statement
		until, now := g.held(t)
		// The hold is one longest lease (2 s) from the first statement.
		if hold := until.Sub(losers[0].Now); hold < 2*time.Second-precision || hold > 2*time.Second+time.Second {
			t.Errorf("QuarantinedUntil = %v, %v after the first statement, want about the longest lease 2s", until, hold)
		}
		for i, res := range losers {
			if res.ExpiresAt.Before(until.Add(-precision)) {
				t.Errorf("loser %d reports expiry %v, before the hold's end %v", i, res.ExpiresAt, until)
			}
		}
		if nr := losers[2]; nr.Holder != "" || nr.Version != 0 {
			t.Errorf("a name without a row reported holder %q, version %d; want free (\"\", 0) but held", nr.Holder, nr.Version)
		}
		sleepFor(until.Sub(now))
		for _, name := range []string{"expired", "released", "new-name"} {
			res := acquire(t, s, name, "b", 0, time.Second)
			if !res.Acquired || res.Holder != "b" {
				t.Fatalf("%s: no new term after the hold ended: %+v", name, res)
			}
			if res.Version < floor || res.Version <= released.Version {
				t.Errorf("%s: new term at version %d, want at least %d (the database clock in µs at the new incarnation's first statement)",
					name, res.Version, floor)
			}
		}
	})
	t.Run("ExpiredHolderGetsANewTermOnlyAfterTheHold", func(t *testing.T) {
		t.Parallel()
		g := newGuardCase(t, fresh)
		acquire(t, g.s, "long", "x", 0, 2*time.Second) // the longest lease: the hold lasts 2 s
		first := acquire(t, g.s, "a-flag", "a", 0, leadership.MinLease*20)
		g.newIncarnation(t)
		s := g.open(t)
		sleepUntilExpiry(first)
		res := acquire(t, s, "a-flag", "a", first.Version, time.Second)
		until, _ := g.held(t)
		if res.Acquired {
			t.Fatalf("a term that expired renewed during the hold (until %v): %+v", until, res)
		}
		if res.ExpiresAt.Before(until.Add(-precision)) {
			t.Errorf("the refused renewal reports expiry %v, before the hold's end %v", res.ExpiresAt, until)
		}
		sleepFor(until.Sub(res.Now))
		// After the hold, its expired term of the earlier incarnation is
		// not renewed but replaced: a lost later term may have raised a
		// higher token meanwhile, and tokens never go backwards.
		if res := acquire(t, s, "a-flag", "a", first.Version, time.Second); !res.Acquired || res.Version <= first.Version {
			t.Fatalf("the holder's attempt after the hold = %+v, want a new term above version %d", res, first.Version)
		}
	})
	t.Run("SecondNewIncarnationRaisesTheFloorAgain", func(t *testing.T) {
		t.Parallel()
		g := newGuardCase(t, fresh)
		acquire(t, g.s, "a-flag", "a", 0, leadership.MinLease*20)
		var last int64
		for round := range 2 {
			g.newIncarnation(t)
			s := g.open(t)
			time.Sleep(2 * leadership.MinLease * 20)
			lost := acquire(t, s, "a-flag", "b", 0, leadership.MinLease*20)
			if lost.Acquired {
				t.Fatalf("round %d: takeover at once after a new incarnation: %+v", round, lost)
			}
			until, now := g.held(t)
			sleepFor(until.Sub(now))
			res := acquire(t, s, "a-flag", "b", 0, leadership.MinLease*20)
			if !res.Acquired {
				t.Fatalf("round %d: no takeover after the hold: %+v", round, res)
			}
			if floor := lost.Now.Add(-precision).UnixMicro(); res.Version < floor || res.Version <= last {
				t.Fatalf("round %d: version %d, want above %d and at least %d (the clock in µs at the incarnation's first statement)",
					round, res.Version, last, floor)
			}
			last = res.Version
		}
	})
	t.Run("QuarantineHoldsNewTermsAndLetsHoldersRenew", func(t *testing.T) {
		t.Parallel()
		g := newGuardCase(t, fresh)
		// A holder and a quarantine that outlast, on a loaded server, the
		// steps below up to the holder's renewal (a new store among them).
		holder := acquire(t, g.s, "held", "a", 0, 6*time.Second)
		short := acquire(t, g.s, "short", "a", 0, leadership.MinLease*20)
		for _, d := range []time.Duration{0, -time.Second} {
			if _, err := g.q.Quarantine(ctx(t), d); !errors.Is(err, leadership.ErrInvalidArgument) {
				t.Errorf("Quarantine(%v) = %v, want ErrInvalidArgument", d, err)
			}
		}
		until, err := g.q.Quarantine(ctx(t), 4*time.Second)
		if err != nil {
			t.Fatalf("Quarantine: %v", err)
		}
		again, err := g.q.Quarantine(ctx(t), time.Second)
		if err != nil {
			t.Fatalf("Quarantine: %v", err)
		}
		if again.Before(until) {
			t.Errorf("Quarantine(1s) after Quarantine(4s) ended the hold at %v, earlier than %v", again, until)
		}
		if got, _ := g.held(t); !got.Equal(again) {
			t.Errorf("QuarantinedUntil = %v, want %v", got, again)
		}
		sleepUntilExpiry(short)
		s := g.open(t)
		for _, name := range []string{"short", "new-name"} {
			res := acquire(t, s, name, "b", 0, time.Second)
			if res.Acquired || res.ExpiresAt.Before(until.Add(-precision)) {
				t.Errorf("%s: during a quarantine until %v: %+v, want refused with expiry at or after the hold's end", name, until, res)
			}
		}
		if res := acquire(t, s, "held", "a", holder.Version, 6*time.Second); !res.Acquired || res.Version != holder.Version {
			t.Errorf("an unexpired holder could not renew during a quarantine: %+v", res)
		}
		now := acquire(t, s, "short", "b", 0, time.Second).Now
		sleepFor(until.Sub(now))
		if res := acquire(t, s, "new-name", "b", 0, time.Second); !res.Acquired {
			t.Errorf("no first acquisition after the quarantine ended: %+v", res)
		}
	})
	t.Run("HoldLastsTheLongestLeaseAskedBefore", func(t *testing.T) {
		t.Parallel()
		g := newGuardCase(t, fresh)
		acquire(t, g.s, "long", "x", 0, 3*time.Second)
		g.newIncarnation(t)
		res := acquire(t, g.open(t), "new-name", "b", 0, time.Second)
		if res.Acquired {
			t.Fatalf("a first acquisition started at once after a new incarnation: %+v", res)
		}
		if hold := res.ExpiresAt.Sub(res.Now); hold < 3*time.Second-precision || hold > 4*time.Second {
			t.Errorf("a 1s request noticed the new incarnation and reports a hold of %v, want the 3s lease used before", hold)
		}
	})
}

// guardCase is one case's schema.
type guardCase struct {
	open           Open
	newIncarnation func(testing.TB)
	s              leadership.Store
	q              leadership.Quarantiner
}

func newGuardCase(t *testing.T, fresh Fresh) guardCase {
	t.Helper()
	open, inc := fresh(t)
	s := open(t)
	if err := s.Migrate(ctx(t)); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	q, ok := s.(leadership.Quarantiner)
	if !ok {
		t.Fatalf("the store %T does not implement leadership.Quarantiner", s)
	}
	return guardCase{open: open, newIncarnation: inc, s: s, q: q}
}

// held reports QuarantinedUntil.
func (g guardCase) held(t *testing.T) (until, now time.Time) {
	t.Helper()
	until, now, err := g.q.QuarantinedUntil(ctx(t))
	if err != nil {
		t.Fatalf("QuarantinedUntil: %v", err)
	}
	return until, now
}

// sleepFor sleeps for d, a span of the database clock, and a little more.
func sleepFor(d time.Duration) { time.Sleep(max(d, 0) + 20*time.Millisecond) }
