//go:build unix

package chaos

import (
	"os"
	"strconv"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
)

// The failover scenarios (issue 15, docs/failover.md): the database loses
// commits it acknowledged, by a promotion of an asynchronous standby that
// missed them or by a crash of a server that had not written them, while
// the flag changes hands. Workers reach the database each through a proxy
// of its own, which the test switches to the promoted server, and which
// also cuts the old leader off at the failover: that leader still trusts
// its term, lost with the commits, until its trust window ends. The
// checker then requires no overlap and no fencing token raised by two
// processes; with the unguarded mutant (worker -unguarded) the same
// scenarios must find one.

// EnvFailovers sets how many failovers the long mode forces (default 30).
const EnvFailovers = "LEADERSHIP_CHAOS_FAILOVERS"

// failoverBound is how soon after the clients can reach the new or
// restarted server a new leader must raise: the guard holds every flag
// for the longest lease from its first statement, then a follower
// attempts at the hold's end or at its next poll.
const failoverBound = lease + 2*poll + slack

// failovers is how many rounds a failover scenario runs.
func failovers(t *testing.T) int {
	if os.Getenv(EnvLong) != "1" {
		return 3
	}
	n := 30
	if v := os.Getenv(EnvFailovers); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", EnvFailovers, v)
		}
	}
	return n
}

// TestFailoverPostgresPromotedAsyncStandbyNeverGivesTwoLeadersOrOneTokenTwice
// promotes an asynchronous standby that missed the last takeover and
// renewals, again and again, under the guarded postgres store.
func TestFailoverPostgresPromotedAsyncStandbyNeverGivesTwoLeadersOrOneTokenTwice(t *testing.T) {
	scenarioPromotion(t, false)
}

// TestFailoverPostgresCrashLosingCommitsNeverGivesTwoLeadersOrOneTokenTwice
// crashes a server running with synchronous_commit=off just after a
// takeover it has not written, under the guarded postgres store.
func TestFailoverPostgresCrashLosingCommitsNeverGivesTwoLeadersOrOneTokenTwice(t *testing.T) {
	scenarioLostCommits(t, false)
}

// TestFailoverPostgresCrashLosingTheFirstTermsOfASchemaNeverGivesTwoLeadersOrOneTokenTwice
// crashes a server running with synchronous_commit=off before anything
// the first acquire statements of a migrated schema wrote reached its WAL
// files, under the guarded postgres store.
func TestFailoverPostgresCrashLosingTheFirstTermsOfASchemaNeverGivesTwoLeadersOrOneTokenTwice(t *testing.T) {
	scenarioFreshSchemaLost(t, false)
}

// TestFailoverUnguardedMutantGivesTwoLeadersOrOneTokenTwice runs the same
// scenarios with the unguarded mutant: each must find a violation, or the
// scenarios prove nothing about the guard.
func TestFailoverUnguardedMutantGivesTwoLeadersOrOneTokenTwice(t *testing.T) {
	t.Run("Promotion", func(t *testing.T) { scenarioPromotion(t, true) })
	t.Run("Crash", func(t *testing.T) { scenarioLostCommits(t, true) })
	t.Run("CrashFreshSchema", func(t *testing.T) { scenarioFreshSchemaLost(t, true) })
}

// routed is a cluster whose workers each reach the database through a
// proxy of their own.
type routed struct {
	*cluster
	dsnAt    func(addr string) string // the DSN of the database at addr
	upstream string                   // where new proxies lead
	proxies  map[string]*proxy        // by worker
}

// newRouted migrates the database at upstream and returns a cluster on
// it; mutant runs the unguarded mutant, and then the check requires a
// violation instead of forbidding them.
func newRouted(t *testing.T, dsnAt func(string) string, upstream string, mutant bool) *routed {
	c := newCluster(t, dsnAt(upstream))
	if mutant {
		c.workerArgs = []string{"-unguarded"}
		c.wantViolation = true
	}
	return &routed{cluster: c, dsnAt: dsnAt, upstream: upstream, proxies: map[string]*proxy{}}
}

// startWorker starts a worker behind a new proxy to the upstream.
func (r *routed) startWorker() string {
	px := newProxy(r.t, r.upstream)
	id := r.start(r.dsnAt(px.addr()), 0)
	r.proxies[id] = px
	return id
}

// route sets where worker id's proxy leads and whether it lets
// connections through; a change closes the connections it carries.
func (r *routed) route(id, upstream string, enabled bool) {
	r.t.Helper()
	p := r.proxies[id].p
	if err := p.Update(&toxiproxy.Proxy{Listen: p.Listen, Upstream: upstream, Enabled: enabled}); err != nil {
		r.t.Fatalf("proxy of %s: %v", id, err)
	}
}

// routeAll leads every proxy to upstream, enabling all but those in off.
func (r *routed) routeAll(upstream string, off ...string) {
	r.t.Helper()
	r.upstream = upstream
	for id := range r.proxies {
		enabled := true
		for _, o := range off {
			enabled = enabled && id != o
		}
		r.route(id, upstream, enabled)
	}
}

// takeover forces the leader out (SIGKILL in even rounds, SIGTERM in odd
// ones), waits for the next leader, starts a replacement worker and
// returns the new leader and its token.
func (r *routed) takeover(round int) (string, int64) {
	r.t.Helper()
	holder := r.leader()
	fault, at, bound := "kill", int64(0), crashBound
	if round%2 == 0 {
		at = r.kill(holder)
	} else {
		fault, at, bound = "term", r.term(holder), handoverBound
	}
	next, took := r.waitLeader(bound, at, holder)
	r.record(fault+" before the failover", took)
	r.startWorker()
	return next, r.token(next)
}

// token waits until worker id reports the token of its open run.
func (r *routed) token(id string) int64 {
	r.t.Helper()
	for deadline := time.Now().Add(slack); ; time.Sleep(time.Millisecond) {
		rep := r.worker(id).report()
		if k := len(rep.Intervals); k > 0 && len(rep.Intervals[k-1].Tokens) > 0 {
			toks := rep.Intervals[k-1].Tokens
			return toks[len(toks)-1]
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("worker %s reported no token %v after it raised", id, slack)
		}
	}
}

// rejoin waits until the cut-off leader id has lowered (its trust window
// ends at most a lease after its last renewal, which was before cut) and
// reconnects it: it goes on as a follower.
func (r *routed) rejoin(id string, cut int64) {
	r.t.Helper()
	time.Sleep(time.Duration(cut + int64(lease+slack) - Mono()))
	rep := r.worker(id).report()
	if k := len(rep.Intervals); k > 0 && rep.Intervals[k-1].Open() && !r.worker(id).exited() {
		r.t.Fatalf("worker %s, cut off from the database, still reports its flag raised %v later", id, lease+slack)
	}
	r.route(id, r.upstream, true)
}

// scenarioPromotion: a primary and an asynchronous streaming standby whose
// replication connection goes through a proxy. Each round: wait until the
// standby has replayed everything, cut replication, force a takeover on
// the primary alone (the new term and its renewals are never replicated),
// then fail over: cut the new leader off, kill the primary, promote the
// standby, and switch the other workers' proxies to it. A new leader must
// raise within failoverBound; a new standby is made from the new primary
// for the next round.
func scenarioPromotion(t *testing.T, mutant bool) {
	settings := []string{"fsync=off", "wal_retrieve_retry_interval=100ms"}
	primary := newPrimary(t, settings...)
	repl := newProxy(t, primary.addr())
	standby := newStandby(t, repl.addr(), settings...)
	r := newRouted(t, pgDSN, primary.addr(), mutant)
	for range 3 {
		r.startWorker()
	}
	var waits []time.Duration
	for round := range failovers(t) {
		r.leader()
		waitReplayed(t, primary, standby)
		repl.p.Stop() // cut replication: from here on, nothing reaches the standby
		next, token := r.takeover(round)
		time.Sleep(lease / 2) // renewals on the primary alone

		cut := Mono()
		r.route(next, r.upstream, false)
		primary.crash()
		standby.promote()
		if v := standby.version(r.name); v >= token {
			t.Fatalf("round %d: the promoted standby has version %d, want below %d: the takeover was replicated, the cut failed", round, v, token)
		}
		at := Mono()
		r.routeAll(standby.addr(), next)
		leader, took := r.waitLeader(failoverBound, at, next)
		r.record("failover", took)
		waits = append(waits, took)
		t.Logf("round %d: %s took over with token %d on the primary alone; failover took %v; %s raised %v after the clients could reach the promoted standby",
			round, next, token, time.Duration(at-cut).Round(time.Millisecond), leader, took.Round(time.Millisecond))
		r.rejoin(next, cut)

		primary.remove()
		primary = standby
		repl = newProxy(t, primary.addr())
		standby = newStandby(t, repl.addr(), settings...)
	}
	t.Logf("%d failovers, each losing a takeover; new leader after the failover: %s", len(waits), summarize(waits))
}

// asyncCommitSettings make a server acknowledge commits before their WAL
// leaves its memory, where it stays up to 10 s (the WAL writer's delay;
// fsync is on, and nothing else writes WAL early: no checkpoint, no
// background writer, no autovacuum), so that a crash loses them.
var asyncCommitSettings = []string{"synchronous_commit=off", "wal_writer_delay=10s", "fsync=on",
	"checkpoint_timeout=1h", "max_wal_size=1GB", "bgwriter_lru_maxpages=0", "autovacuum=off"}

// scenarioLostCommits: one server with asyncCommitSettings. It first makes
// the first term durable, so that what follows tests the guard on a schema
// in use. Each round: force a takeover, let the new leader renew, cut
// every worker off, crash the server (pg_ctl -m immediate) and restart it;
// read the row to see whether the takeover was lost (it is unless the WAL
// writer happened to write in between); reconnect every worker but the
// new leader, which rejoins once its trust window is over. A new leader
// must raise within failoverBound. Rounds go on until enough of them lost
// the takeover.
func scenarioLostCommits(t *testing.T, mutant bool) {
	server := newPrimary(t, asyncCommitSettings...)
	lostCommitRounds(t, newRouted(t, pgDSN, server.addr(), mutant), server, server.flushWAL)
}

// lostCommitRounds runs the rounds of scenarioLostCommits on server, whose
// workers r starts, after flush has made the first term durable.
func lostCommitRounds(t *testing.T, r *routed, server crashable, flush func()) {
	for range 3 {
		r.startWorker()
	}
	r.token(r.leader())
	flush()
	want := failovers(t)
	var waits []time.Duration
	lossy := 0
	for round := 0; lossy < want; round++ {
		if round == 3*want+2 {
			t.Fatalf("only %d of %d crashes lost the takeover before them, want %d", lossy, round, want)
		}
		r.leader()
		next, token := r.takeover(round)
		time.Sleep(lease / 2)
		lost, took := r.crashAndRestart(server, next, token, round)
		if lost {
			lossy++
		}
		waits = append(waits, took)
	}
	t.Logf("%d crashes, %d of them losing the takeover; new leader after the restart: %s", len(waits), lossy, summarize(waits))
}

// crashable is a private server a scenario crashes and restarts.
type crashable interface {
	crash()                    // kill it, losing what it has not written
	start()                    // start it and wait until it answers
	addr() string              // where it listens
	version(name string) int64 // the version of the flag's row, 0 if none
}

// crashAndRestart cuts every worker off, crashes and restarts server,
// reports whether it lost the term token of leader, reconnects every
// worker but leader, waits for a new leader (failoverBound) and returns
// how long after the reconnection it raised, and reconnects leader once
// its trust window is over.
func (r *routed) crashAndRestart(server crashable, leader string, token int64, round int) (lost bool, waited time.Duration) {
	r.t.Helper()
	for id := range r.proxies {
		r.route(id, r.upstream, false)
	}
	cut := Mono()
	server.crash()
	server.start()
	v := server.version(r.name)
	at := Mono()
	r.routeAll(server.addr(), leader)
	next, took := r.waitLeader(failoverBound, at, leader)
	r.record("crash", took)
	r.t.Logf("round %d: %s raised with token %d; after the crash and restart (%v) the row has version %d (term lost: %v); %s raised %v after the clients could reach the server",
		round, leader, token, time.Duration(at-cut).Round(time.Millisecond), v, v < token, next, took.Round(time.Millisecond))
	r.rejoin(leader, cut)
	return v < token, took
}

// scenarioFreshSchemaLost: the first terms of a freshly migrated schema
// are lost. On a new server with asyncCommitSettings and a new schema, the
// first leader raises; the server crashes before its WAL is written. The
// restarted server has the schema (the test makes the migration durable
// with a checkpoint) but not the first term, nor anything the first
// acquire statements recorded. The first leader, cut off, still trusts its term; nobody else
// may get its token or raise before its trust window ends. It retries on a
// new server, up to three times, when the WAL writer wrote in between.
func scenarioFreshSchemaLost(t *testing.T, mutant bool) {
	for attempt := range 3 {
		server := newPrimary(t, asyncCommitSettings...)
		r := newRouted(t, pgDSN, server.addr(), mutant)
		server.flushWAL()
		for range 3 {
			r.startWorker()
		}
		leader := r.leader()
		token := r.token(leader)
		time.Sleep(lease / 2)
		if lost, _ := r.crashAndRestart(server, leader, token, attempt); lost {
			return
		}
	}
	t.Fatalf("the first term survived each of 3 crashes: the WAL writer wrote it before the crash")
}
