package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// checkReleasesAtOnce sends the releases of many terms of one store at
// once, as a process closing all its flags does (a store that batches
// sends them together: the postgres, mysql and sqlite stores), rounds
// times, and checks that each is decided by the rules of a release alone:
// a held term is released, keeping its version; a release that names a
// term already taken over (by another holder, or by a later term of the
// same holder) changes nothing and is no error; of two releases of one
// term exactly one reports true, and of a stale and the current term of
// one name only the current one; a release that fails (its context ended
// before the call, or a holder that is not a valid name, which may also
// just release nothing) fails alone, the others of the burst decided as
// usual.
func checkReleasesAtOnce(t *testing.T, open Open) {
	const rounds = 3
	a, b := open(t), open(t)
	base := uniqueName(t)
	for round := range rounds {
		type call struct {
			name, holder string
			version      int64
			ctx          context.Context
			want         string // "true", "false", "error", "error or false"
		}
		var calls []call
		// term acquires name for holder on s, and returns its version.
		term := func(s leadership.Store, name, holder string) int64 {
			t.Helper()
			res := acquire(t, s, name, holder, 0, time.Minute)
			if !res.Acquired {
				t.Fatalf("Acquire(%q, %q) = %+v, want a new term", name, holder, res)
			}
			return res.Version
		}
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		names := map[string]string{} // kind → name
		name := func(kind string) string {
			n := base + "-" + string(rune('0'+round)) + "-" + kind
			names[kind] = n
			return n
		}
		for _, kind := range []string{"held-1", "held-2", "held-3", "held-4", "held-5", "held-6", "held-7", "held-8"} {
			n := name(kind)
			calls = append(calls, call{n, "a", term(a, n, "a"), context.Background(), "true"})
		}
		// Taken over by another holder, and by a later term of the same
		// holder (another process under the same name): the old term's
		// release ends neither.
		for _, by := range []string{"b", "a"} {
			n := name("taken-by-" + by)
			v := term(a, n, "a")
			release(t, a, n, "a", v)
			term(b, n, by)
			calls = append(calls, call{n, "a", v, context.Background(), "false"})
		}
		// One term released twice in one burst.
		n := name("twice")
		v := term(a, n, "a")
		calls = append(calls, call{n, "a", v, context.Background(), "one of two"},
			call{n, "a", v, context.Background(), "one of two"})
		// A stale term and the current one of one name.
		n = name("stale-and-current")
		v = term(a, n, "a")
		release(t, a, n, "a", v)
		cur := term(a, n, "a")
		calls = append(calls, call{n, "a", v, context.Background(), "false"},
			call{n, "a", cur, context.Background(), "true"})
		// Releases that fail: a context that has ended, a holder that is
		// not a valid name.
		n = name("cancelled")
		calls = append(calls, call{n, "a", term(a, n, "a"), cancelled, "error"})
		n = name("bad-holder")
		calls = append(calls, call{n, "a\xff", term(a, n, "a"), context.Background(), "error or false"})

		type outcome struct {
			ok  bool
			err error
		}
		got := make([]outcome, len(calls))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Go(func() {
				<-start
				got[i].ok, got[i].err = a.Release(c.ctx, c.name, c.holder, c.version)
			})
		}
		close(start)
		wg.Wait()
		twice := 0
		for i, c := range calls {
			g := got[i]
			switch c.want {
			case "true":
				if !g.ok || g.err != nil {
					t.Errorf("round %d: Release(%q, %q, %d) = %v, %v; want true", round, c.name, c.holder, c.version, g.ok, g.err)
				}
			case "false":
				if g.ok || g.err != nil {
					t.Errorf("round %d: Release(%q, %q, %d) of a term taken over = %v, %v; want false, no error", round, c.name, c.holder, c.version, g.ok, g.err)
				}
			case "one of two":
				if g.err != nil {
					t.Errorf("round %d: Release(%q, %q, %d) sent twice: %v", round, c.name, c.holder, c.version, g.err)
				}
				if g.ok {
					twice++
				}
			case "error":
				if g.err == nil || !errors.Is(g.err, context.Canceled) {
					t.Errorf("round %d: Release(%q) with an ended context = %v, %v; want its context's error", round, c.name, g.ok, g.err)
				}
			case "error or false":
				if g.ok {
					t.Errorf("round %d: Release(%q, %q) with a holder that holds nothing = true", round, c.name, c.holder)
				}
			}
		}
		if twice != 1 {
			t.Errorf("round %d: of two releases of one term in one burst, %d reported true; want 1", round, twice)
		}
		// The rows: each released one free at its version, each other one
		// as it was.
		rows, _, err := b.Flags(ctx(t))
		if err != nil {
			t.Fatalf("Flags: %v", err)
		}
		row := map[string]leadership.Record{}
		for _, r := range rows {
			row[r.Name] = r
		}
		released := map[string]int64{} // name → version of the term released
		for _, c := range calls {
			if c.want == "true" {
				released[c.name] = c.version
			}
		}
		for kind, n := range names {
			r := row[n]
			if v, ok := released[n]; ok && r.Version != v {
				t.Errorf("round %d: row %s after its release = %+v, want version %d kept", round, kind, r, v)
			}
			want := ""
			switch kind {
			case "taken-by-b":
				want = "b"
			case "taken-by-a", "bad-holder":
				want = "a"
			case "cancelled":
				continue // the store may have begun the release before it saw the end of the context
			}
			if r.Holder != want {
				t.Errorf("round %d: row %s after the burst = %+v, want holder %q", round, kind, r, want)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
}
