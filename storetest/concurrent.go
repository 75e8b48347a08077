package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// concurrentNames is how many flag names the test of many flags of one
// store at once uses: enough that a store which batches concurrent
// Acquires (the postgres and sqlite stores, internal/sqlstore.Batcher:
// one transaction for up to 512 statements) sends batches of many
// statements, with two requests for one name in some of them; few enough
// that a store with a connection per call (mysql) stays within a shared
// server's connections (32 calls at once, as ConcurrentAcquirersOneWins).
const concurrentNames = 16

// checkConcurrentNames runs the attempts of many flags of one store at
// once, as a process with many flags does, in phases, and checks every
// rule of the contract on every row: of two requests of one store for a
// free name exactly one wins, at version 1, and the other learns the
// winner; renewals keep the version and move the expiry; another
// process's attempts lose and learn the holder; when a term has expired
// its holder's renewal and another process's takeover race and exactly one
// wins (the holder at its version, or the other at the next); releases
// free every name for a new term at the next version; and Flags shows
// the rows the results reported.
func checkConcurrentNames(t *testing.T, open Open) {
	a, b := open(t), open(t)
	base := uniqueName(t)
	names := make([]string, concurrentNames)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%02d", base, i)
	}
	// Long enough that the two calls of one name in a burst run within
	// one term, also on a loaded machine (a lease of 1 s once saw the
	// other process's call come after the renewed term had expired).
	const lease = 3 * time.Second
	type call struct {
		s   leadership.Store
		req leadership.Request
	}
	// burst sends every name's calls at once and returns their results.
	burst := func(phase string, calls func(i int) []call) [][]leadership.Result {
		t.Helper()
		out := make([][]leadership.Result, len(names))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range names {
			cs := calls(i)
			out[i] = make([]leadership.Result, len(cs))
			for j, c := range cs {
				wg.Go(func() {
					<-start
					res, err := c.s.Acquire(ctx(t), c.req)
					for try := 1; err != nil && try < 5 && askedToRetry(err); try++ {
						// A flag's next attempt does the same.
						res, err = c.s.Acquire(ctx(t), c.req)
					}
					if err != nil {
						t.Errorf("%s: Acquire(%q, %q, %d): %v", phase, c.req.Name, c.req.Holder, c.req.Version, err)
					}
					out[i][j] = res
				})
			}
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		return out
	}
	req := func(i int, holder string, version int64) leadership.Request {
		return leadership.Request{Name: names[i], Holder: holder, Version: version, Lease: lease}
	}
	// checkWon checks the result of an acquisition or renewal.
	checkWon := func(phase string, res leadership.Result, holder string, version int64) {
		t.Helper()
		if !res.Acquired || res.Holder != holder || res.Version != version {
			t.Fatalf("%s: %+v, want acquired by %s at version %d", phase, res, holder, version)
		}
		if d := res.RenewedAt.Sub(res.Now); d < -precision || d > precision {
			t.Fatalf("%s: RenewedAt %v differs from Now %v", phase, res.RenewedAt, res.Now)
		}
		if l := res.ExpiresAt.Sub(res.RenewedAt); l < lease || l > lease+precision {
			t.Fatalf("%s: ExpiresAt - RenewedAt = %v, want the lease %v", phase, l, lease)
		}
	}
	// oneWinner checks that of rs, the results of one name's requests
	// when its row was prev (free), exactly one won, and that each other
	// reports the winner's term or prev, and returns the winner.
	oneWinner := func(phase string, i int, prev leadership.Record, rs []leadership.Result) leadership.Result {
		t.Helper()
		var won []leadership.Result
		for _, r := range rs {
			if r.Acquired {
				won = append(won, r)
			}
		}
		if len(won) != 1 {
			t.Fatalf("%s of %s: %d winners among %+v, want exactly 1", phase, names[i], len(won), rs)
		}
		for _, r := range rs {
			// A loser ran after the winner (before it, the name was free)
			// and reports its term; or, when it ran concurrently with the
			// winner's statement, the row as it read it before (postgres
			// under READ COMMITTED: the free row, or an empty record when
			// the winner created the row, see its scanAcquire).
			sawWinner := r.Holder == won[0].Holder && r.Version == won[0].Version && r.ExpiresAt.After(r.Now)
			sawPrev := r.Holder == prev.Holder && r.Version == prev.Version && !r.ExpiresAt.After(r.Now)
			if !r.Acquired && !sawWinner && !sawPrev {
				t.Fatalf("%s of %s: a loser reported %+v, want the winner's term %s/%d unexpired, or the free row %s/%d",
					phase, names[i], r, won[0].Holder, won[0].Version, prev.Holder, prev.Version)
			}
		}
		return won[0]
	}

	// Two requests of store a per free name: one wins at version 1.
	held := make([]leadership.Result, len(names))
	for i, rs := range burst("first acquisitions", func(i int) []call {
		return []call{{a, req(i, "a1", 0)}, {a, req(i, "a2", 0)}}
	}) {
		held[i] = oneWinner("first acquisitions", i, leadership.Record{}, rs)
		checkWon("first acquisition of "+names[i], held[i], held[i].Holder, 1)
	}
	// The holders renew while store b tries every name.
	for i, rs := range burst("renewals against another process", func(i int) []call {
		return []call{{a, req(i, held[i].Holder, 1)}, {b, req(i, "b", 0)}}
	}) {
		checkWon("renewal of "+names[i], rs[0], held[i].Holder, 1)
		if !rs[0].ExpiresAt.After(held[i].ExpiresAt) && !rs[0].ExpiresAt.Equal(held[i].ExpiresAt) {
			t.Fatalf("renewal of %s moved the expiry back: %v, then %v", names[i], held[i].ExpiresAt, rs[0].ExpiresAt)
		}
		if r := rs[1]; r.Acquired && !r.Now.Before(rs[0].ExpiresAt) {
			t.Fatalf("attempt of another process on %s = %+v won %v after the renewed term had expired (%+v): the burst took longer than the lease, so this test cannot judge it",
				names[i], r, r.Now.Sub(rs[0].ExpiresAt), rs[0])
		} else if r.Acquired || r.Holder != held[i].Holder || r.Version != 1 || !r.ExpiresAt.After(r.Now) {
			t.Fatalf("attempt of another process on %s = %+v, want lost to %s at version 1, unexpired (the renewal: %+v)", names[i], r, held[i].Holder, rs[0])
		}
		held[i] = rs[0]
	}
	// Once the terms have expired, each holder's renewal races a
	// takeover by store b: exactly one wins.
	time.Sleep(lease + 50*time.Millisecond)
	for i, rs := range burst("renewals against takeovers", func(i int) []call {
		return []call{{a, req(i, held[i].Holder, 1)}, {b, req(i, "b", 0)}}
	}) {
		won := oneWinner("renewal against takeover", i, held[i].Record, rs)
		if won.Holder == "b" {
			checkWon("takeover of "+names[i], won, "b", 2)
		} else {
			checkWon("renewal after expiry of "+names[i], won, held[i].Holder, 1)
		}
		held[i] = won
	}
	// Every holder releases at once; then both stores race for each name.
	var wg sync.WaitGroup
	for i := range names {
		s := a
		if held[i].Holder == "b" {
			s = b
		}
		wg.Go(func() {
			if ok, err := s.Release(ctx(t), names[i], held[i].Holder, held[i].Version); err != nil || !ok {
				t.Errorf("Release(%q, %q, %d) = %v, %v; want true", names[i], held[i].Holder, held[i].Version, ok, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i, rs := range burst("acquisitions after releases", func(i int) []call {
		return []call{{a, req(i, "a3", 0)}, {b, req(i, "b2", 0)}}
	}) {
		won := oneWinner("acquisition after release", i, leadership.Record{Version: held[i].Version}, rs)
		checkWon("acquisition after release of "+names[i], won, won.Holder, held[i].Version+1)
		held[i] = won
	}
	rows, _, err := a.Flags(ctx(t))
	if err != nil {
		t.Fatalf("Flags: %v", err)
	}
	found := 0
	for _, r := range rows {
		for i, n := range names {
			if r.Name == n {
				found++
				if r.Holder != held[i].Holder || r.Version != held[i].Version || !r.ExpiresAt.Equal(held[i].ExpiresAt) {
					t.Errorf("row %+v, want the last winner's term %+v", r, held[i].Record)
				}
			}
		}
	}
	if found != len(names) {
		t.Errorf("Flags lists %d of the %d names", found, len(names))
	}
}

// checkManyFlagsPerStore runs three processes, each one store with a flag
// for each of many names, as services with many flags do (the postgres
// and sqlite stores then batch their attempts): every name gets a leader,
// and after a process closes, each name it led passes to another process
// at a higher token, while a monitor per name checks that two flags of
// one name are never raised at once.
func checkManyFlagsPerStore(t *testing.T, open Open) {
	const names, procs = 12, 3
	base := uniqueName(t)
	mons := make([]*monitor, names)
	flags := make([][]*leadership.Flag, procs) // by process, then name
	for i := range mons {
		mons[i] = newMonitor(t)
	}
	for p := range procs {
		s := open(t)
		connect(t, s)
		for i := range names {
			b := leadership.NewFlag().Store(s).Name(fmt.Sprintf("%s-%02d", base, i)).Process(fmt.Sprintf("p%d", p))
			flags[p] = append(flags[p], mons[i].buildWith(t, b, lease))
		}
	}
	for _, m := range mons {
		m.waitForLeader(t, lease+slack)
	}
	time.Sleep(2 * lease) // renewing, and attempting as followers, in batches
	leaders := make([]*leadership.Flag, names)
	for i, m := range mons {
		leaders[i] = m.waitForLeader(t, slack)
	}
	// The process leading name 0 closes all its flags at once.
	closing := slices.IndexFunc(flags, func(fs []*leadership.Flag) bool { return fs[0] == leaders[0] })
	tokens := make([]int64, names)
	for i, f := range leaders {
		tokens[i], _ = f.Token()
	}
	var wg sync.WaitGroup
	for _, f := range flags[closing] {
		wg.Go(func() {
			if err := f.Close(); err != nil {
				// A release may time out when many writers contend (SQLite
				// has one); the term then expires within the lease.
				t.Logf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	for i, m := range mons {
		if !slices.Contains(flags[closing], leaders[i]) {
			continue
		}
		next := m.waitForLeader(t, poll+slack, leaders[i])
		if got, _ := next.Token(); got <= tokens[i] {
			t.Errorf("name %d: token after handover = %d, want above %d", i, got, tokens[i])
		}
	}
}

// askedToRetry reports whether err is the database asking for the
// statement to be run again: a serialization failure or deadlock (in a
// SERIALIZABLE or REPEATABLE READ session, where concurrent batches on the
// same rows conflict even after the store's one retry), a lock wait
// timeout, or SQLite's busy database.
func askedToRetry(err error) bool {
	msg := err.Error()
	for _, s := range []string{"SQLSTATE 40001", "SQLSTATE 40P01", "Error 1213", "Error 1205", "database is locked", "SQLITE_BUSY"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
