package storetest

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// precision is how far apart two instants of the database clock may be
// rounded by a store (SQLite keeps milliseconds).
const precision = 2 * time.Millisecond

func runContract(t *testing.T, open Open) {
	s := open(t)
	t.Run("AcquireFresh", func(t *testing.T) {
		t.Parallel()
		name := uniqueName(t)
		res := acquire(t, s, name, "a", 0, 5*time.Second)
		if !res.Acquired || res.Holder != "a" || res.Version != 1 || res.Name != name {
			t.Fatalf("fresh acquire = %+v, want acquired by a at version 1", res)
		}
		if d := res.RenewedAt.Sub(res.Now); d < -precision || d > precision {
			t.Errorf("RenewedAt %v differs from Now %v", res.RenewedAt, res.Now)
		}
		if lease := res.ExpiresAt.Sub(res.RenewedAt); lease < 5*time.Second || lease > 5*time.Second+precision {
			t.Errorf("ExpiresAt - RenewedAt = %v, want the lease 5s", lease)
		}
	})
	t.Run("RenewKeepsVersion", func(t *testing.T) {
		t.Parallel()
		name := uniqueName(t)
		first := acquire(t, s, name, "a", 0, 5*time.Second)
		time.Sleep(20 * time.Millisecond)
		res := acquire(t, s, name, "a", first.Version, 5*time.Second)
		if !res.Acquired || res.Version != first.Version {
			t.Fatalf("renew = %+v, want acquired at version %d", res, first.Version)
		}
		if !res.ExpiresAt.After(first.ExpiresAt) {
			t.Errorf("renewal did not move the expiry: %v then %v", first.ExpiresAt, res.ExpiresAt)
		}
	})
	t.Run("HeldByOtherReportsHolder", func(t *testing.T) {
		t.Parallel()
		name := uniqueName(t)
		first := acquire(t, s, name, "a", 0, 5*time.Second)
		res := acquire(t, open(t), name, "b", 0, 5*time.Second)
		if res.Acquired {
			t.Fatalf("b acquired a flag held by a: %+v", res)
		}
		if res.Holder != "a" || res.Version != first.Version || !res.ExpiresAt.Equal(first.ExpiresAt) {
			t.Errorf("losing result = %+v, want holder a, version %d, expiry %v", res.Record, first.Version, first.ExpiresAt)
		}
		if left := res.ExpiresAt.Sub(res.Now); left <= 0 || left > 5*time.Second {
			t.Errorf("expiry - now = %v, want within (0, 5s]", left)
		}
	})
	t.Run("VersionZeroDoesNotRenew", func(t *testing.T) {
		t.Parallel()
		name := uniqueName(t)
		acquire(t, s, name, "a", 0, 5*time.Second)
		if res := acquire(t, s, name, "a", 0, 5*time.Second); res.Acquired {
			t.Fatalf("a request without a term renewed a held term: %+v", res)
		}
	})
	t.Run("TakeoverAfterExpiry", func(t *testing.T) {
		t.Parallel()
		name := uniqueName(t)
		// A loaded client can send b's attempt after a's short lease has
		// passed, when a takeover is right: then the check is made again
		// with a longer lease. A takeover before the expiry by the
		// database clock fails at once.
		var first leadership.Result
		for _, lease := range []time.Duration{300 * time.Millisecond, 2 * time.Second, 10 * time.Second} {
			name = uniqueName(t)
			first = acquire(t, s, name, "a", 0, lease)
			res := acquire(t, s, name, "b", 0, time.Second)
			if !res.Acquired {
				break
			}
			if res.Now.Before(first.ExpiresAt) {
				t.Fatalf("b took over at %v, before the expiry %v: %+v", res.Now, first.ExpiresAt, res)
			}
			if lease == 10*time.Second {
				t.Fatalf("b's attempt came after a's lease of %v each time (last %+v): the client is too slow to check this", lease, res)
			}
		}
		sleepUntilExpiry(first)
		res := acquire(t, open(t), name, "b", 0, time.Second)
		if !res.Acquired || res.Holder != "b" || res.Version != first.Version+1 {
			t.Fatalf("takeover = %+v, want acquired by b at version %d", res, first.Version+1)
		}
		if old := acquire(t, s, name, "a", first.Version, time.Second); old.Acquired || old.Holder != "b" {
			t.Fatalf("the expired term renewed over b's: %+v", old)
		}
	})
	t.Run("OwnTermRenewsAfterExpiry", func(t *testing.T) {
		t.Parallel()
		name := uniqueName(t)
		first := acquire(t, s, name, "a", 0, 100*time.Millisecond)
		sleepUntilExpiry(first)
		res := acquire(t, s, name, "a", first.Version, time.Second)
		if !res.Acquired || res.Version != first.Version {
			t.Fatalf("renewal of an expired term nobody took = %+v, want version %d kept", res, first.Version)
		}
	})
	t.Run("RenewalIsScopedToTheTerm", func(t *testing.T) {
		t.Parallel()
		// Two instances configured with the same process name.
		name := uniqueName(t)
		first := acquire(t, s, name, "same", 0, 100*time.Millisecond)
		sleepUntilExpiry(first)
		second := acquire(t, open(t), name, "same", 0, 5*time.Second)
		if !second.Acquired || second.Version != first.Version+1 {
			t.Fatalf("second instance = %+v, want a new term at version %d", second, first.Version+1)
		}
		if res := acquire(t, s, name, "same", first.Version, 5*time.Second); res.Acquired {
			t.Fatalf("the first instance renewed the second's term: %+v", res)
		}
	})
	t.Run("DifferentLeasesNeverOverlap", func(t *testing.T) {
		t.Parallel()
		name := uniqueName(t)
		long := acquire(t, s, name, "long", 0, 2*time.Second)
		deadline := time.Now().Add(long.ExpiresAt.Sub(long.Now))
		for time.Now().Before(deadline.Add(-300 * time.Millisecond)) {
			res := acquire(t, s, name, "short", 0, 50*time.Millisecond)
			if res.Acquired && res.Now.Before(long.ExpiresAt) {
				t.Fatalf("a short-lease process took over %v before the long lease expired, by the database clock: %+v",
					long.ExpiresAt.Sub(res.Now), res)
			}
			if res.Acquired {
				// The call was slow enough (a loaded pooler) to reach the
				// database after the long lease expired: a legal takeover.
				t.Logf("a slow attempt reached the database %v after the long lease expired: a legal takeover",
					res.Now.Sub(long.ExpiresAt))
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		sleepUntilExpiry(long)
		if res := acquire(t, s, name, "short", 0, 50*time.Millisecond); !res.Acquired {
			t.Fatalf("no takeover after the long lease expired: %+v", res)
		}
	})
	t.Run("ReleaseKeepsVersion", func(t *testing.T) {
		t.Parallel()
		name := uniqueName(t)
		first := acquire(t, s, name, "a", 0, time.Minute)
		if ok := release(t, s, name, "a", first.Version+1); ok {
			t.Fatal("released a term that is not the row's")
		}
		if ok := release(t, s, name, "b", first.Version); ok {
			t.Fatal("released another holder's term")
		}
		if ok := release(t, s, name, "a", first.Version); !ok {
			t.Fatal("Release of the held term reported false")
		}
		row := find(t, s, name)
		if row.Holder != "" || row.Version != first.Version {
			t.Fatalf("row after release = %+v, want no holder and version %d kept", row, first.Version)
		}
		if ok := release(t, s, name, "a", first.Version); ok {
			t.Fatal("a second release reported true")
		}
		res := acquire(t, open(t), name, "b", 0, time.Minute)
		if !res.Acquired || res.Version != first.Version+1 {
			t.Fatalf("acquire right after release = %+v, want version %d at once", res, first.Version+1)
		}
	})
	t.Run("EvictBlocksHolderAndWaitsForExpiry", func(t *testing.T) {
		t.Parallel()
		name := uniqueName(t)
		first := acquire(t, s, name, "a", 0, 3*time.Second)
		if ok, err := s.Evict(ctx(t), name); err != nil || !ok {
			t.Fatalf("Evict = %v, %v; want true", ok, err)
		}
		row := find(t, s, name)
		if row.Holder != "" || row.Version != first.Version || !row.ExpiresAt.Equal(first.ExpiresAt) {
			t.Fatalf("row after evict = %+v, want no holder, version %d and expiry %v kept", row, first.Version, first.ExpiresAt)
		}
		// On a loaded machine the term may have expired by now; only an
		// acquisition before its expiry by the database clock is wrong.
		for _, holder := range []string{"a", "b"} {
			version := first.Version // a's attempt names its evicted term
			if holder == "b" {
				version = 0
			}
			res := acquire(t, s, name, holder, version, time.Minute)
			if !res.Acquired {
				continue
			}
			if res.Now.Before(first.ExpiresAt) {
				t.Fatalf("%s acquired before the evicted term's expiry: %+v", holder, res)
			}
			// The machine was slow enough for the term to expire: the
			// takeover is legal, and must start the next term.
			if res.Version != first.Version+1 {
				t.Fatalf("acquire by %s after the evicted term expired = %+v, want version %d", holder, res, first.Version+1)
			}
			return
		}
		if ok, err := s.Evict(ctx(t), name); err != nil || ok {
			t.Fatalf("Evict of a free flag = %v, %v; want false, nil", ok, err)
		}
		sleepUntilExpiry(first)
		if res := acquire(t, s, name, "b", 0, time.Minute); !res.Acquired || res.Version != first.Version+1 {
			t.Fatalf("acquire after the evicted term expired = %+v, want version %d", res, first.Version+1)
		}
		if ok, err := s.Evict(ctx(t), uniqueName(t)); err != nil || ok {
			t.Fatalf("Evict of an unknown flag = %v, %v; want false, nil", ok, err)
		}
	})
	t.Run("ConcurrentAcquirersOneWins", func(t *testing.T) {
		t.Parallel()
		stores := []leadership.Store{s, open(t), open(t), open(t)}
		for round := range 3 {
			name := uniqueName(t)
			const perStore = 8
			results := make(chan leadership.Result, len(stores)*perStore)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, st := range stores {
				for j := range perStore {
					wg.Go(func() {
						<-start
						res, err := st.Acquire(ctx(t), leadership.Request{
							Name: name, Holder: string(rune('a'+i)) + string(rune('a'+j)), Lease: time.Minute,
						})
						if err != nil {
							t.Errorf("round %d: concurrent Acquire: %v", round, err)
							return
						}
						results <- res
					})
				}
			}
			close(start)
			wg.Wait()
			close(results)
			var winners []string
			for res := range results {
				if res.Acquired {
					winners = append(winners, res.Holder)
				}
			}
			if len(winners) != 1 {
				t.Fatalf("round %d: %d winners %v among %d concurrent acquirers, want exactly 1", round, len(winners), winners, len(stores)*perStore)
			}
			if row := find(t, s, name); row.Holder != winners[0] || row.Version != 1 {
				t.Fatalf("round %d: row %+v, want holder %s at version 1", round, row, winners[0])
			}
		}
	})
	t.Run("ConcurrentTakeoverOneWins", func(t *testing.T) {
		t.Parallel()
		stores := []leadership.Store{s, open(t), open(t)}
		// Each store first answers as many calls at once as the rounds
		// make, so that the rounds race the stores' statements rather than
		// their first connections (a login can take longer than the lease).
		var warm sync.WaitGroup
		for _, st := range stores {
			for range 5 {
				warm.Go(func() {
					if _, _, err := st.Flags(ctx(t)); err != nil {
						t.Errorf("Flags: %v", err)
					}
				})
			}
		}
		warm.Wait()
		name := uniqueName(t)
		prev := acquire(t, s, name, "first", 0, 100*time.Millisecond)
		for round := range 3 {
			sleepUntilExpiry(prev)
			var mu sync.Mutex
			var winners []leadership.Result
			var wg sync.WaitGroup
			for i, st := range stores {
				for j := range 5 {
					wg.Go(func() {
						res, err := st.Acquire(ctx(t), leadership.Request{
							Name: name, Holder: string(rune('a'+i)) + string(rune('a'+j)), Lease: time.Second,
						})
						if err != nil {
							t.Errorf("concurrent takeover: %v", err)
							return
						}
						if res.Acquired {
							mu.Lock()
							winners = append(winners, res)
							mu.Unlock()
						}
					})
				}
			}
			wg.Wait()
			// One winner, unless a loaded client sent a straggler after the
			// winner's lease had passed: then each later winner must have
			// started its term at or after the expiry of the one before, by
			// the database clock, one version up. Two winners whose terms
			// overlap fail.
			slices.SortFunc(winners, func(a, b leadership.Result) int { return cmp.Compare(a.Version, b.Version) })
			if len(winners) == 0 {
				t.Fatalf("round %d: nobody took over after the expiry", round)
			}
			for i, w := range winners {
				if w.Version != prev.Version+1 {
					t.Fatalf("round %d: winners %+v after %+v, want each one version up from the one before", round, winners, prev)
				}
				if i > 0 && w.Now.Before(prev.ExpiresAt) {
					t.Fatalf("round %d: %d winners with overlapping terms: %+v", round, len(winners), winners)
				}
				prev = w
			}
		}
	})
	t.Run("ConcurrentNamesOfOneStore", func(t *testing.T) {
		t.Parallel()
		checkConcurrentNames(t, open)
	})
	t.Run("ReleasesOfOneStoreAtOnce", func(t *testing.T) {
		t.Parallel()
		checkReleasesAtOnce(t, open)
	})
	t.Run("FlagsListsRows", func(t *testing.T) {
		t.Parallel()
		base := uniqueName(t)
		a, b := base+"-a", base+"-b"
		ra := acquire(t, s, a, "x", 0, time.Minute)
		acquire(t, s, b, "y", 0, time.Minute)
		release(t, s, b, "y", 1)
		rows, now, err := s.Flags(ctx(t))
		if err != nil {
			t.Fatalf("Flags: %v", err)
		}
		if now.IsZero() {
			t.Error("Flags returned a zero database clock")
		}
		var got []leadership.Record
		for i, r := range rows {
			if i > 0 && rows[i-1].Name >= r.Name {
				t.Errorf("Flags not ordered by name: %q before %q", rows[i-1].Name, r.Name)
			}
			if r.Name == a || r.Name == b {
				got = append(got, r)
			}
		}
		if len(got) != 2 || got[0].Name != a || got[0].Holder != "x" || got[0].Version != 1 ||
			!got[0].ExpiresAt.Equal(ra.ExpiresAt) || got[1].Name != b || got[1].Holder != "" || got[1].Version != 1 {
			t.Fatalf("Flags rows = %+v, want %s held by x and %s released, both at version 1", got, a, b)
		}
	})
	t.Run("UnicodeNamesRoundTrip", func(t *testing.T) {
		t.Parallel()
		name := uniqueName(t) + "-ünïcødé-名前-🚩"
		holder := "höst-名前"
		res := acquire(t, s, name, holder, 0, time.Minute)
		if !res.Acquired || res.Name != name || res.Holder != holder {
			t.Fatalf("unicode acquire = %+v", res)
		}
		if again := acquire(t, s, name, holder, res.Version, time.Minute); !again.Acquired {
			t.Fatalf("unicode renewal failed: %+v", again)
		}
		long := strings.Repeat("n", leadership.MaxNameLength-len(name)) + name
		if res := acquire(t, s, long, holder, 0, time.Minute); !res.Acquired || res.Name != long {
			t.Fatalf("name of MaxNameLength bytes: %+v", res)
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		good := leadership.Request{Name: uniqueName(t), Holder: "a", Lease: time.Second}
		bad := map[string]leadership.Request{}
		for field, mutate := range map[string]func(*leadership.Request){
			"empty name":        func(r *leadership.Request) { r.Name = "" },
			"long name":         func(r *leadership.Request) { r.Name = strings.Repeat("x", leadership.MaxNameLength+1) },
			"control character": func(r *leadership.Request) { r.Name = "a\nb" },
			"invalid UTF-8":     func(r *leadership.Request) { r.Name = "a\xffb" },
			"trailing space":    func(r *leadership.Request) { r.Name = "pad " },
			"leading space":     func(r *leadership.Request) { r.Holder = " a" },
			"empty holder":      func(r *leadership.Request) { r.Holder = "" },
			"negative version":  func(r *leadership.Request) { r.Version = -1 },
			"zero lease":        func(r *leadership.Request) { r.Lease = 0 },
			"negative lease":    func(r *leadership.Request) { r.Lease = -time.Second },
		} {
			r := good
			mutate(&r)
			bad[field] = r
		}
		for field, r := range bad {
			if _, err := s.Acquire(ctx(t), r); !errors.Is(err, leadership.ErrInvalidArgument) {
				t.Errorf("Acquire with %s: error %v, want ErrInvalidArgument", field, err)
			}
		}
		if _, err := s.Release(ctx(t), "", "a", 1); !errors.Is(err, leadership.ErrInvalidArgument) {
			t.Errorf("Release with empty name: %v, want ErrInvalidArgument", err)
		}
		if _, err := s.Evict(ctx(t), ""); !errors.Is(err, leadership.ErrInvalidArgument) {
			t.Errorf("Evict with empty name: %v, want ErrInvalidArgument", err)
		}
		if rows, _, err := s.Flags(ctx(t)); err != nil {
			t.Fatal(err)
		} else {
			for _, r := range rows {
				if r.Name == good.Name {
					t.Errorf("a rejected request wrote a row: %+v", r)
				}
			}
		}
	})
}

func acquire(t testing.TB, s leadership.Store, name, holder string, version int64, lease time.Duration) leadership.Result {
	t.Helper()
	res, err := s.Acquire(ctx(t), leadership.Request{Name: name, Holder: holder, Version: version, Lease: lease})
	if err != nil {
		t.Fatalf("Acquire(%q, %q, %d): %v", name, holder, version, err)
	}
	return res
}

func release(t testing.TB, s leadership.Store, name, holder string, version int64) bool {
	t.Helper()
	ok, err := s.Release(ctx(t), name, holder, version)
	if err != nil {
		t.Fatalf("Release(%q, %q, %d): %v", name, holder, version, err)
	}
	return ok
}

func find(t testing.TB, s leadership.Store, name string) leadership.Record {
	t.Helper()
	rows, _, err := s.Flags(ctx(t))
	if err != nil {
		t.Fatalf("Flags: %v", err)
	}
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("Flags has no row %q", name)
	return leadership.Record{}
}

// sleepUntilExpiry sleeps until res's term has expired by the database
// clock, measured as a duration from the statement so that clock offsets
// between test and database do not matter.
func sleepUntilExpiry(res leadership.Result) {
	time.Sleep(res.ExpiresAt.Sub(res.Now) + 20*time.Millisecond)
}
