package memstore_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/memstore"
	"github.com/dbflag/leadership/storetest"
)

// TestConformance shows that the in-memory store, on which the algorithm's
// unit tests and simulations run, obeys the same contract as the database
// stores.
func TestConformance(t *testing.T) {
	s := memstore.New()
	storetest.Run(t, func(testing.TB) leadership.Store { return s })
}

// TestGuardConformance shows that the in-memory store implements the
// failover guard of docs/failover.md as the database stores must: a new
// store is a fresh schema, and a failover that loses nothing is a new
// incarnation.
func TestGuardConformance(t *testing.T) {
	storetest.RunGuard(t, func(testing.TB) (storetest.Open, func(testing.TB)) {
		s := memstore.New()
		return func(testing.TB) leadership.Store { return s }, func(t testing.TB) {
			if err := s.Failover(0, 0); err != nil {
				t.Fatalf("Failover: %v", err)
			}
		}
	})
}

func acquire(t *testing.T, s *memstore.Store, name, holder string, version int64) leadership.Result {
	t.Helper()
	res, err := s.Acquire(context.Background(), leadership.Request{Name: name, Holder: holder, Version: version, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestFailoverLosesTheLatestWrites checks that Failover rolls rows back to
// the state they had before the writes it loses, creations included, and
// that the guard then holds new terms and raises the version floor.
func TestFailoverLosesTheLatestWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.WithHistory(time.Minute))
		a := acquire(t, s, "kept", "a", 0)
		time.Sleep(2 * time.Second) // a's term expires
		b := acquire(t, s, "kept", "b", 0)
		lostRow := acquire(t, s, "lost", "b", 0)
		if !b.Acquired || b.Version != 2 || !lostRow.Acquired {
			t.Fatalf("setup: %+v %+v", b, lostRow)
		}
		if err := s.Failover(time.Second, 0); err != nil {
			t.Fatal(err)
		}
		rows, now, _ := s.Flags(context.Background())
		if len(rows) != 1 || rows[0].Name != "kept" || rows[0].Holder != "a" || rows[0].Version != a.Version || !rows[0].ExpiresAt.Equal(a.ExpiresAt) {
			t.Fatalf("after losing the last second: %+v, want only a's term %+v", rows, a.Record)
		}
		res := acquire(t, s, "kept", "b", 0)
		if res.Acquired || !res.ExpiresAt.Equal(now.Add(time.Second)) {
			t.Fatalf("takeover right after the failover = %+v, want refused until %v", res, now.Add(time.Second))
		}
		time.Sleep(time.Second)
		res = acquire(t, s, "kept", "b", 0)
		if !res.Acquired || res.Version != now.UnixMicro() {
			t.Fatalf("takeover after the hold = %+v, want version %d (the floor)", res, now.UnixMicro())
		}
	})
}

// TestFailoverLosesGuardWritesToo checks that a hold written in the lost
// commits is lost with them, and that Failover refuses to lose more than
// the history it keeps.
func TestFailoverLosesGuardWritesToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := memstore.New(memstore.WithHistory(time.Second))
		acquire(t, s, "f", "a", 0)
		time.Sleep(2 * time.Second)
		if _, err := s.Quarantine(ctx, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := s.Failover(2*time.Second, 0); !errors.Is(err, leadership.ErrInvalidArgument) {
			t.Fatalf("Failover beyond the history = %v, want ErrInvalidArgument", err)
		}
		if err := s.Failover(time.Second, 0); err != nil {
			t.Fatal(err)
		}
		until, now, _ := s.QuarantinedUntil(ctx)
		if until.After(now) {
			t.Fatalf("the lost quarantine is still in force until %v (now %v)", until, now)
		}
	})
}

// TestFailoverMovesTheClock checks the new server's clock offset.
func TestFailoverMovesTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		_, before, _ := s.Flags(context.Background())
		if err := s.Failover(0, time.Hour); err != nil {
			t.Fatal(err)
		}
		_, after, _ := s.Flags(context.Background())
		if after.Sub(before) != time.Hour {
			t.Fatalf("the clock moved by %v, want 1h", after.Sub(before))
		}
	})
}

// TestWithoutGuardForTestIgnoresIncarnations shows the test-only mutant:
// a takeover right after a failover, at the next version.
func TestWithoutGuardForTestIgnoresIncarnations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.WithoutGuardForTest())
		a := acquire(t, s, "f", "a", 0)
		time.Sleep(2 * time.Second)
		if err := s.Failover(0, 0); err != nil {
			t.Fatal(err)
		}
		if res := acquire(t, s, "f", "b", 0); !res.Acquired || res.Version != a.Version+1 {
			t.Fatalf("takeover without the guard = %+v, want at once at version %d", res, a.Version+1)
		}
	})
}

// TestExpiredTermOfEarlierIncarnationIsNotRenewed checks the store's
// addition to rule 4 (guard.go): after a failover, a holder whose term
// expired gets a new term above the floor instead of renewing its old
// version, which a lost successor may have exceeded; under the rule as
// docs/failover.md words it (WithDraftRenewalRuleForTest) it renews.
func TestExpiredTermOfEarlierIncarnationIsNotRenewed(t *testing.T) {
	for _, draft := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var opts []memstore.Option
			if draft {
				opts = append(opts, memstore.WithDraftRenewalRuleForTest())
			}
			s := memstore.New(opts...)
			a := acquire(t, s, "f", "a", 0)
			time.Sleep(2 * time.Second) // a's term expires
			if err := s.Failover(0, 0); err != nil {
				t.Fatal(err)
			}
			held := acquire(t, s, "f", "a", a.Version)
			if held.Acquired {
				t.Fatalf("draft %v: an expired term renewed during the hold: %+v", draft, held)
			}
			time.Sleep(time.Second)
			res := acquire(t, s, "f", "a", a.Version)
			switch {
			case !res.Acquired:
				t.Fatalf("draft %v: no term after the hold: %+v", draft, res)
			case draft && res.Version != a.Version:
				t.Fatalf("draft rule: version %d, want the old term %d renewed", res.Version, a.Version)
			case !draft && res.Version != held.Now.UnixMicro():
				t.Fatalf("a new term at version %d, want the floor %d", res.Version, held.Now.UnixMicro())
			}
		})
	}
}
