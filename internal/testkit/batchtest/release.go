package batchtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// CheckReleaseRules sends releases as one batch through together (a
// store's Send, through SendTogether) and checks each by the rules of a
// release alone: a held term is released, keeping its version and
// expiring now; a release of a term taken over by another holder, or by
// a later term of the same holder, of a free row or of a name without a
// row changes nothing and reports false; of two releases of one term one
// reports true; of a stale and the current term of one name, only the
// current one. s and other are stores of two processes on one migrated
// database; names start with prefix.
func CheckReleaseRules(t testing.TB, s, other leadership.Store, together func(context.Context, ...sqlstore.Release) ([]bool, error), prefix string) {
	t.Helper()
	ctx := context.Background()
	term := func(s leadership.Store, name, holder string) int64 {
		t.Helper()
		res, err := s.Acquire(ctx, leadership.Request{Name: name, Holder: holder, Lease: time.Minute})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire(%q, %q) = %+v, %v; want a new term", name, holder, res, err)
		}
		return res.Version
	}
	end := func(name, holder string, version int64) {
		t.Helper()
		if ok, err := s.Release(ctx, name, holder, version); err != nil || !ok {
			t.Fatalf("Release(%q, %q, %d) = %v, %v", name, holder, version, ok, err)
		}
	}
	type release struct {
		sqlstore.Release
		want string // "true", "false", "one of two"
	}
	var reqs []release
	add := func(want, name, holder string, version int64) {
		reqs = append(reqs, release{sqlstore.Release{Name: prefix + name, Holder: holder, Version: version}, want})
	}
	for i := range 3 {
		n := fmt.Sprintf("held-%d", i)
		add("true", n, "a", term(s, prefix+n, "a"))
	}
	for _, by := range []string{"b", "a"} {
		n := "taken-by-" + by
		v := term(s, prefix+n, "a")
		end(prefix+n, "a", v)
		term(other, prefix+n, by)
		add("false", n, "a", v)
	}
	v := term(s, prefix+"twice", "a")
	add("one of two", "twice", "a", v)
	add("one of two", "twice", "a", v)
	v = term(s, prefix+"stale-and-current", "a")
	end(prefix+"stale-and-current", "a", v)
	add("false", "stale-and-current", "a", v)
	add("true", "stale-and-current", "a", term(s, prefix+"stale-and-current", "a"))
	v = term(s, prefix+"free", "a")
	end(prefix+"free", "a", v)
	add("false", "free", "a", v)
	add("false", "no-row", "a", 1)
	// Another holder's term, of the right version.
	add("false", "held-0", "b", reqs[0].Version)

	before := rowsByName(t, other)
	batch := make([]sqlstore.Release, len(reqs))
	for i, r := range reqs {
		batch[i] = r.Release
	}
	got, err := together(ctx, batch...)
	if err != nil {
		t.Fatalf("the batch of %d releases failed: %v", len(batch), err)
	}
	after := rowsByName(t, other)
	twice := 0
	for i, r := range reqs {
		switch r.want {
		case "true":
			row := after[r.Name]
			if !got[i] || row.Holder != "" || row.Version != r.Version || !row.ExpiresAt.Before(before[r.Name].ExpiresAt) {
				t.Errorf("release of %+v = %v, row %+v (was %+v); want true, and the row free at its version, expiring now", r.Release, got[i], row, before[r.Name])
			}
		case "false":
			if got[i] {
				t.Errorf("release of %+v = true, want false", r.Release)
			}
			if slices.ContainsFunc(reqs, func(o release) bool { return o.Name == r.Name && o.want != "false" }) {
				continue // its row is another request's
			}
			if after[r.Name] != before[r.Name] {
				t.Errorf("release of %+v changed the row %+v to %+v", r.Release, before[r.Name], after[r.Name])
			}
		case "one of two":
			if got[i] {
				twice++
			}
		}
	}
	if twice != 1 {
		t.Errorf("of two releases of one term in one batch, %d reported true; want 1", twice)
	}
}

// rowsByName returns the rows of s by name.
func rowsByName(t testing.TB, s leadership.Store) map[string]leadership.Record {
	t.Helper()
	rows, _, err := s.Flags(context.Background())
	if err != nil {
		t.Fatalf("Flags: %v", err)
	}
	out := make(map[string]leadership.Record, len(rows))
	for _, r := range rows {
		out[r.Name] = r
	}
	return out
}

// CheckCloseMany builds 64 flags on a (one process) and a follower of each
// on b (another), closes every flag of a at once, as a service does at
// shutdown, and checks that each Close released its term, that the
// releases travelled in a few batches (stats reports a's batches and
// releases), and that every follower took over well before its poll (the
// releases' notifications reached b: its store's hint was waited for
// first). Names start with prefix.
func CheckCloseMany(t *testing.T, a, b leadership.Store, prefix string, stats func() (batches, releases int64)) {
	t.Helper()
	const n = 64
	build := func(s leadership.Store, process string, raised []time.Time, mu *sync.Mutex) []*leadership.Flag {
		t.Helper()
		flags := make([]*leadership.Flag, n)
		var wg sync.WaitGroup
		for i := range flags {
			wg.Go(func() {
				f, err := leadership.NewFlag().Store(s).Name(fmt.Sprintf("%s-%02d", prefix, i)).Process(process).Migrate(false).
					OnRaise(func(context.Context) {
						mu.Lock()
						raised[i] = time.Now()
						mu.Unlock()
					}).Build(context.Background())
				if err != nil {
					t.Errorf("Build: %v", err)
					return
				}
				t.Cleanup(func() { _ = f.Close() })
				flags[i] = f
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		return flags
	}
	var mu sync.Mutex
	leaders := build(a, "leader", make([]time.Time, n), &mu)
	raised := make([]time.Time, n)
	build(b, "follower", raised, &mu)
	waitForHint(t, b)
	b0, r0 := stats()
	start := time.Now()
	var wg sync.WaitGroup
	for _, f := range leaders {
		wg.Go(func() {
			if err := f.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	closed := time.Since(start)
	b1, r1 := stats()
	// A poll comes at most 2 s after the release (15 s on PostgreSQL),
	// anywhere in that interval: 64 handovers within 1.5 s by polls
	// alone are most unlikely.
	const limit = 1500 * time.Millisecond
	for deadline := start.Add(limit); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		waiting := slices.IndexFunc(raised, time.Time.IsZero)
		mu.Unlock()
		if waiting < 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower of flag %d has not taken over %v after the Close calls began", waiting, limit)
		}
	}
	slowest := slices.MaxFunc(raised, time.Time.Compare).Sub(start)
	t.Logf("64 Close calls at once: %d releases in %d batches, every flag released after %v, every follower raised after %v",
		r1-r0, b1-b0, closed, slowest)
	if r1-r0 != n {
		t.Errorf("%d releases sent, want %d", r1-r0, n)
	}
	if b1-b0 > n/4 {
		t.Errorf("%d releases in %d batches; releases due together should travel in a few", r1-r0, b1-b0)
	}
}
