package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/mysql"
)

// The stores of these tests stand for processes: each has a pool of its
// own and, unless a test says otherwise, a process name of its own (the
// default name is one per process, and these stores share one).

// buildFlag builds a flag named name on store under the process name
// process (the default when empty), with a poll interval long enough that
// a handover well before it came from the release hint.
func buildFlag(t *testing.T, store *mysql.Store, name, process string, lease, poll time.Duration) *leadership.Flag {
	t.Helper()
	b := leadership.NewFlag().Store(store).Name(name).Lease(lease).PollInterval(poll)
	if process != "" {
		b = b.Process(process)
	}
	f, err := b.Build(context.Background())
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// handOver closes leader, waits for follower to raise and fails the test
// unless it raised within a second, far below poll: only the release hint
// explains that. why says what should have woken it. It returns how long
// the handover took.
func handOver(t *testing.T, leader, follower *leadership.Flag, poll time.Duration, why string) time.Duration {
	t.Helper()
	closed := time.Now()
	if err := leader.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*poll)
	defer cancel()
	if err := follower.Wait(ctx); err != nil {
		t.Fatalf("the follower did not take over: %v", err)
	}
	took := time.Since(closed)
	if took > time.Second {
		t.Errorf("handover took %v; %s, well before the follower's %v poll", took, why, poll)
	}
	return took
}

// TestAReleaseWakesAFollowerOfAnotherProcessBeforeItsPoll builds a leader
// and a follower in two processes, with a 5 s poll interval, and checks
// that the follower takes over well before its poll after the leader's
// Close, three times, back and forth: the release reached it through the
// leader's bell and the follower's waiter.
func TestAReleaseWakesAFollowerOfAnotherProcessBeforeItsPoll(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		dsn := freshDatabase(t, testdb.MySQL(t), nil)
		const poll = 5 * time.Second
		stores := []*mysql.Store{newStore(t, openDB(t, dsn), opts...), newStore(t, openDB(t, dsn), opts...)}
		processes := []string{"p0", "p1"}
		leader := buildFlag(t, stores[0], "handover", processes[0], 30*time.Second, poll)
		if !leader.Raised() {
			t.Fatal("the first flag did not raise")
		}
		follower := buildFlag(t, stores[1], "handover", processes[1], 30*time.Second, poll)
		if follower.Raised() {
			t.Fatal("the second flag raised while the first leads")
		}
		time.Sleep(300 * time.Millisecond) // the follower now waits out its poll
		for round := range 3 {
			took := handOver(t, leader, follower, poll, "the release hint should have woken the follower")
			t.Logf("round %d: handover took %v", round, took)
			// Back the other way: the follower's store now rings, the
			// leader's store (a new flag on it) follows.
			leader, follower = follower, buildFlag(t, stores[round%2], "handover", processes[round%2], 30*time.Second, poll)
			time.Sleep(300 * time.Millisecond)
		}
	})
}

// TestTwoStoresOfOneProcessRingTheirHolderNamesBell has two stores of one
// process lead three flags under one holder name (the default name is the
// process's), and a store of another process follow them. A lock is held
// by one connection: the first store holds the bell, and rings it for the
// second store's release; once the first store leads nothing, it lets the
// bell go and the second store takes it, and rings it for its own. Every
// handover comes well before the follower's poll.
func TestTwoStoresOfOneProcessRingTheirHolderNamesBell(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	const lease, poll = 30 * time.Second, 5 * time.Second
	first, second := newStore(t, openDB(t, dsn)), newStore(t, openDB(t, dsn))
	following := newStore(t, openDB(t, dsn))
	leaders := map[string]*leadership.Flag{}
	followers := map[string]*leadership.Flag{}
	for _, name := range []string{"x", "y", "z"} {
		store := second
		if name == "x" {
			store = first
		}
		leaders[name] = buildFlag(t, store, name, "p", lease, poll)
		followers[name] = buildFlag(t, following, name, "f", lease, poll)
		if !leaders[name].Raised() || followers[name].Raised() {
			t.Fatalf("flag %s: the process p should lead, the other follow", name)
		}
	}
	holder := bellConnection(t, openDB(t, dsn), "p")
	time.Sleep(300 * time.Millisecond) // the waiter now waits on p's bell
	took := handOver(t, leaders["y"], followers["y"], poll, "the first store should have rung the bell for the second's release")
	t.Logf("handover of y (the second store's, rung by the first) took %v", took)
	took = handOver(t, leaders["x"], followers["x"], poll, "the first store should have rung its bell")
	t.Logf("handover of x (the first store's) took %v", took)
	if taken := bellConnection(t, openDB(t, dsn), "p"); taken == holder {
		t.Fatal("the first store still holds the bell of p, though it leads nothing")
	}
	time.Sleep(300 * time.Millisecond)
	took = handOver(t, leaders["z"], followers["z"], poll, "the second store should have taken the bell and rung it")
	t.Logf("handover of z (the second store's, on the bell it took) took %v", took)
}

// TestACrashedHolderIsNoRelease acquires a flag for a holder that then
// "crashes": it never renews nor releases, and its bell's connection is
// killed. The follower's waiter hears the bell fall silent, but the wake
// is only a hint: no takeover happens before the row expires, and the
// waiter, finding the bell no longer held, leaves it alone instead of
// spinning on it.
func TestACrashedHolderIsNoRelease(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	ctx := context.Background()
	crashed := newStore(t, openDB(t, dsn))
	if err := crashed.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const lease = 4 * time.Second
	acquired := time.Now() // before the term began: its end is no earlier than acquired + lease
	res, err := crashed.Acquire(ctx, leadership.Request{Name: "crash", Holder: "crashed", Lease: lease})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	owner := bellConnection(t, openDB(t, dsn), "crashed")
	store := newStore(t, openDB(t, dsn))
	follower := buildFlag(t, store, "crash", "f", lease, 500*time.Millisecond)
	if follower.Raised() {
		t.Fatal("the follower raised while the row is held")
	}
	time.Sleep(300 * time.Millisecond) // the waiter now waits on the bell
	before, killed := store.WatchStatements(), time.Now()
	if _, err := openDB(t, dsn).Exec(`KILL ?`, owner); err != nil {
		t.Fatalf("kill the bell's connection %d: %v", owner, err)
	}
	if err := follower.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if early := time.Until(acquired.Add(lease)); early > 0 {
		t.Fatalf("the follower took over %v before the crashed holder's row expired", early)
	}
	sent := store.WatchStatements() - before
	t.Logf("takeover %v after the kill, %v after the acquire of a %v lease; the waiter sent %d statements meanwhile",
		time.Since(killed), time.Since(acquired), lease, sent)
	// About: the wait the kill ends, RELEASE_LOCK and a look, then a wait
	// that finds the bell free and a look after pauses of 0.1 s, 0.4 s,
	// 1.6 s: 9 in 4 s.
	if sent > 16 {
		t.Errorf("the waiter sent %d statements: it should leave a silent bell alone", sent)
	}
}

// TestAStoreHoldsOneConnectionForItsBellsAndOnePerProcessItFollows checks
// a store that leads three flags and follows three others, led by another
// process: at rest it holds two connections of its pool, its bells' and
// the waiter's, whatever the number of flags.
func TestAStoreHoldsOneConnectionForItsBellsAndOnePerProcessItFollows(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	db, otherDB := openDB(t, dsn), openDB(t, dsn)
	store, other := newStore(t, db), newStore(t, otherDB)
	const lease, poll = 30 * time.Second, 10 * time.Second
	for i := range 3 {
		name := string(rune('a' + i))
		if f := buildFlag(t, store, "led-"+name, "s", lease, poll); !f.Raised() {
			t.Fatal("the store's own flag did not raise")
		}
		if f := buildFlag(t, other, "followed-"+name, "o", lease, poll); !f.Raised() {
			t.Fatal("the other store's flag did not raise")
		}
		if f := buildFlag(t, store, "followed-"+name, "s", lease, poll); f.Raised() {
			t.Fatal("the follower raised")
		}
	}
	time.Sleep(500 * time.Millisecond)
	least, most := connectionsInUse(t, db)
	if least != 2 || most > 4 {
		t.Errorf("connections in use: %d to %d, want 2 at rest (the bells' and the waiter's), 4 at most during attempts (two batches in flight)", least, most)
	}
}

// TestBellNamesFitAndNeedNoQuoting checks that a bell's name fits the
// 64 characters of a user-level lock name whatever the database and
// holder names, has only characters that need no escaping in the
// statements that spell it out, and differs between holders and between
// databases.
func TestBellNamesFitAndNeedNoQuoting(t *testing.T) {
	long := strings.Repeat("é'\\", 100)
	seen := map[string]bool{}
	for _, c := range [][2]string{{"app", "a"}, {"app", "b"}, {"other", "a"}, {"app" + long, long}, {"ap", "pa"}, {"app", "pa"}} {
		n := mysql.BellName(c[0], c[1])
		if len(n) > 64 || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789/") != "" {
			t.Errorf("BellName(%q, %q) = %q: longer than 64 or with characters to escape", c[0], c[1], n)
		}
		if seen[n] {
			t.Errorf("BellName(%q, %q) = %q, the name of another pair", c[0], c[1], n)
		}
		seen[n] = true
	}
}

// TestAWaiterWaitsAgainAfterItsConnectionOrWaitIsKilled kills the
// waiter's connection (KILL, as a server restart or a network failure
// does) or its statement (KILL QUERY, as an administrator or a statement
// timeout does: GET_LOCK then returns NULL or fails): the waiter waits
// again on a new connection after its pause of 1 s, and the next release
// still reaches the follower well before its poll.
func TestAWaiterWaitsAgainAfterItsConnectionOrWaitIsKilled(t *testing.T) {
	t.Parallel()
	for _, kill := range []string{"KILL", "KILL QUERY"} {
		t.Run(kill, func(t *testing.T) {
			t.Parallel()
			dsn := freshDatabase(t, testdb.MySQL(t), nil)
			const lease, poll = 30 * time.Second, 5 * time.Second
			leader := buildFlag(t, newStore(t, openDB(t, dsn)), "killed", "l", lease, poll)
			store := newStore(t, openDB(t, dsn))
			follower := buildFlag(t, store, "killed", "f", lease, poll)
			if !leader.Raised() || follower.Raised() {
				t.Fatal("the first flag should lead, the second follow")
			}
			admin := openDB(t, dsn)
			waits := waitsOnBells(t, admin, 1)
			if _, err := admin.Exec(kill+` ?`, waits[0].id); err != nil {
				t.Fatalf("%s %d (the waiter's): %v", kill, waits[0].id, err)
			}
			time.Sleep(1500 * time.Millisecond) // its pause of 1 s
			waitsOnBells(t, admin, 1)           // then a new wait
			if !store.HintsOtherProcesses() {
				t.Fatal("the waiter does not wait again")
			}
			took := handOver(t, leader, follower, poll, "the waiter should have waited again and woken the follower")
			t.Logf("handover after %s took %v", kill, took)
		})
	}
}

// TestAWaiterMovesToTheHolderItsFlagsWaitOn has a store follow two flags
// led by two other processes, h-a and h-b, on a pool of three
// connections, which leaves room for one waiter: it waits on the bell of
// h-a (the first by name on a tie). When the store's flag on h-a's row
// closes, no flag of the store waits on h-a any more, and the waiter of
// h-b must start at once, not after the wait on h-a's bell times out:
// h-b's release then reaches the follower well before its poll.
func TestAWaiterMovesToTheHolderItsFlagsWaitOn(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	const lease, poll = 30 * time.Second, 5 * time.Second
	buildFlag(t, newStore(t, openDB(t, dsn)), "a", "h-a", lease, poll)
	leaderB := buildFlag(t, newStore(t, openDB(t, dsn)), "b", "h-b", lease, poll)
	capped := openDB(t, dsn)
	capped.SetMaxOpenConns(3)
	store := newStore(t, capped)
	followerA := buildFlag(t, store, "a", "f", lease, poll)
	followerB := buildFlag(t, store, "b", "f", lease, poll)
	if followerA.Raised() || followerB.Raised() || !leaderB.Raised() {
		t.Fatal("the flags of h-a and h-b should lead, the store's follow")
	}
	admin := openDB(t, dsn)
	if waits := waitsOnBells(t, admin, 1); waits[0].bell != bellOf(t, admin, "h-a") {
		t.Fatalf("the waiter waits on %s, want the bell of h-a", waits[0].bell)
	}
	followerA.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if waits := waitsOnBells(t, admin, 1); waits[0].bell == bellOf(t, admin, "h-b") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no waiter waits on the bell of h-b")
		}
	}
	took := handOver(t, leaderB, followerB, poll, "the waiter should have moved to h-b's bell and woken the follower")
	t.Logf("handover from h-b took %v", took)
}

// TestAWaiterWaitsLessThanTheReadTimeout gives the follower's pool a DSN
// with readTimeout=3s, which cuts the waiter's first GET_LOCK: the waiter
// must then wait less than that, and a release a few seconds later still
// reaches the follower well before its poll.
func TestAWaiterWaitsLessThanTheReadTimeout(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	const lease, poll = 30 * time.Second, 5 * time.Second
	leader := buildFlag(t, newStore(t, openDB(t, dsn)), "timeout", "l", lease, poll)
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ReadTimeout = 3 * time.Second
	store := newStore(t, openDB(t, cfg.FormatDSN()))
	follower := buildFlag(t, store, "timeout", "f", lease, poll)
	if !leader.Raised() || follower.Raised() {
		t.Fatal("the first flag should lead, the second follow")
	}
	// The first wait fails at 3 s, the waiter reconnects 1 s later and
	// waits 1 s at a time from then on.
	time.Sleep(8 * time.Second)
	took := handOver(t, leader, follower, poll, "the waiter should have waited less than the read timeout and woken the follower")
	t.Logf("handover with readTimeout=3s took %v; the waiter sent %d statements", took, store.WatchStatements())
}

// TestAFollowerIsWokenByEveryReleaseOfTheProcessItWaitsOn has one process
// lead three flags and another follow all three, through one waiter on
// the leading process's bell, which every release of that process rings:
// each of the three handovers comes well before the follower's poll.
func TestAFollowerIsWokenByEveryReleaseOfTheProcessItWaitsOn(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		dsn := freshDatabase(t, testdb.MySQL(t), nil)
		const lease, poll = 30 * time.Second, 5 * time.Second
		leading, following := newStore(t, openDB(t, dsn), opts...), newStore(t, openDB(t, dsn), opts...)
		var leaders, followers []*leadership.Flag
		for _, name := range []string{"a", "b", "c"} {
			leader, follower := buildFlag(t, leading, name, "l", lease, poll), buildFlag(t, following, name, "f", lease, poll)
			if !leader.Raised() || follower.Raised() {
				t.Fatalf("flag %s: the leading store's flag should lead, the other follow", name)
			}
			leaders, followers = append(leaders, leader), append(followers, follower)
		}
		time.Sleep(300 * time.Millisecond) // the waiter now waits on the leading process's bell
		for _, i := range []int{2, 0, 1} {
			took := handOver(t, leaders[i], followers[i], poll, "the leading process's bell should have woken the follower")
			t.Logf("handover of %s took %v", leaders[i].Name(), took)
		}
	})
}

// TestAShutdownWakesTheFollowersOfEveryFlag has one process lead eight
// flags and another follow them, then closes the eight leaders one right
// after the other, as a process does when it shuts down: the releases
// ring the leading process's bell in quick succession, and every follower
// must raise well before its poll. A waiter that waited again between a
// ring and the holder's retake of its bell would find it silent and miss
// the rings that follow.
func TestAShutdownWakesTheFollowersOfEveryFlag(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		dsn := freshDatabase(t, testdb.MySQL(t), nil)
		const lease, poll = 30 * time.Second, 5 * time.Second
		leading, following := newStore(t, openDB(t, dsn), opts...), newStore(t, openDB(t, dsn), opts...)
		var leaders, followers []*leadership.Flag
		for i := range 8 {
			name := string(rune('a' + i))
			leaders = append(leaders, buildFlag(t, leading, name, "l", lease, poll))
			followers = append(followers, buildFlag(t, following, name, "f", lease, poll))
			if !leaders[i].Raised() || followers[i].Raised() {
				t.Fatalf("flag %s: the leading store's flag should lead, the other follow", name)
			}
		}
		time.Sleep(300 * time.Millisecond) // the waiter now waits on the leading process's bell
		closed := time.Now()
		for _, l := range leaders {
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*poll)
		defer cancel()
		var slowest time.Duration
		for i, f := range followers {
			if err := f.Wait(ctx); err != nil {
				t.Fatalf("follower %d did not take over: %v", i, err)
			}
			// Eight releases and eight takeovers, one after another: 2 s on
			// a loaded server. Woken at their polls instead, the eight
			// would spread over 5 s.
			took := time.Since(closed)
			slowest = max(slowest, took)
			if took > 2*time.Second {
				t.Errorf("follower %d raised %v after the shutdown began; the leading process's bell should have woken it, well before its %v poll", i, took, poll)
			}
		}
		t.Logf("the eight followers raised within %v of the shutdown's start", slowest)
	})
}

// TestABellFoundFreeMakesTheWaiterLookAtTheRows has a flag wait on a
// holder whose bell nobody holds (its store's pool is capped at two
// connections, too few for a bell, as when the holder gave its bell up
// right after its last release): the waiter looks at the rows each time
// it finds the bell free, so the holder's release wakes the flag within
// the waiter's pauses, not at its poll.
func TestABellFoundFreeMakesTheWaiterLookAtTheRows(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	capped := openDB(t, dsn)
	capped.SetMaxOpenConns(2)
	leading, store := newStore(t, capped), newStore(t, openDB(t, dsn))
	ctx := context.Background()
	if err := leading.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := leading.Acquire(ctx, leadership.Request{Name: "freed", Holder: "gone", Lease: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	woken, unsubscribe := store.NotifyReleases("freed")
	defer unsubscribe()
	if lost, err := store.Acquire(ctx, leadership.Request{Name: "freed", Holder: "follower", Lease: time.Minute}); err != nil || lost.Acquired {
		t.Fatalf("the follower's Acquire = %+v, %v; want a loss to gone", lost, err)
	}
	time.Sleep(300 * time.Millisecond) // the waiter has found the bell free
	select {
	case <-woken:
		t.Fatal("the flag was woken while the row is held")
	default:
	}
	if ok, err := leading.Release(ctx, "freed", "gone", res.Version); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter, finding the bell free, did not wake the flag whose row is free")
	}
}

// followProcesses builds n leading processes, each leading one flag under
// a process name of its own, and one store that follows the n flags. It
// returns the leaders, the followers in the same order, the follower's
// store and its pool.
func followProcesses(t *testing.T, dsn string, n int, lease, poll time.Duration) (leaders, followers []*leadership.Flag, following *mysql.Store, db *sql.DB) {
	t.Helper()
	db = openDB(t, dsn)
	following = newStore(t, db)
	for i := range n {
		name := string(rune('a' + i))
		leader := buildFlag(t, newStore(t, openDB(t, dsn)), name, "p-"+name, lease, poll)
		follower := buildFlag(t, following, name, "f", lease, poll)
		if !leader.Raised() || follower.Raised() {
			t.Fatalf("flag %s: the leading store's flag should lead, the other follow", name)
		}
		leaders, followers = append(leaders, leader), append(followers, follower)
	}
	return leaders, followers, following, db
}

// TestAFollowerHearsTheReleasesOfEveryProcessItWaitsOn has one store
// follow four flags, each led by a process of its own, and closes the
// leaders one after the other: the store waits on the four bells at once
// (a waiter each, one connection each), so every handover comes well
// before the follower's poll. Then the store leads the four flags, and the
// waiters' connections are back in the pool: one stays in use, the
// bell's.
func TestAFollowerHearsTheReleasesOfEveryProcessItWaitsOn(t *testing.T) {
	t.Parallel()
	const lease, poll = 30 * time.Second, 5 * time.Second
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	leaders, followers, _, db := followProcesses(t, dsn, 4, lease, poll)
	waitForConnections(t, db, 4, "a waiter's per leading process")
	for i := range leaders {
		took := handOver(t, leaders[i], followers[i], poll, "the bell of its leading process should have woken the follower")
		t.Logf("handover from %s took %v", leaders[i].Process(), took)
	}
	waitForConnections(t, db, 1, "the bell's; the waiters' should be back in the pool")
}

// TestAStoreFollowsFourProcessesAtMost has one store follow six flags,
// each led by a process of its own: at rest its waiters wait on four
// different bells, each a leading process's, and hold four connections of
// the pool (one per process followed, no more), and the flags of the two
// processes not followed still take over at their poll.
func TestAStoreFollowsFourProcessesAtMost(t *testing.T) {
	t.Parallel()
	const lease, poll = 30 * time.Second, 2 * time.Second
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	leaders, followers, _, db := followProcesses(t, dsn, 6, lease, poll)
	time.Sleep(500 * time.Millisecond)
	least, most := connectionsInUse(t, db)
	if least != 4 || most > 6 {
		t.Errorf("connections in use: %d to %d, want 4 at rest (a waiter's per leading process, four at most), 6 at most during attempts (two batches in flight)", least, most)
	}
	leading := make(map[string]bool)
	for _, l := range leaders {
		leading[bellOf(t, db, l.Process())] = true
	}
	followed := make(map[string]bool)
	for _, w := range waitsOnBells(t, db, 4) {
		if !leading[w.bell] || followed[w.bell] {
			t.Fatalf("waits on %v: want four different bells of the leading processes", w.bell)
		}
		followed[w.bell] = true
	}
	for _, l := range leaders {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*poll)
	defer cancel()
	for i, f := range followers {
		if err := f.Wait(ctx); err != nil {
			t.Fatalf("follower %d did not take over: %v", i, err)
		}
	}
}

// TestAWaiterStopsWhenNoFlagWaitsOnItsHolder has a store follow four
// flags, each led by a process of its own, then closes three of its four
// flags while their leaders go on leading: the waiters of those
// processes stop and give their connections back (one stays in use), and
// a release by the fourth process still wakes the last flag well before
// its poll.
func TestAWaiterStopsWhenNoFlagWaitsOnItsHolder(t *testing.T) {
	t.Parallel()
	const lease, poll = 30 * time.Second, 5 * time.Second
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	leaders, followers, _, db := followProcesses(t, dsn, 4, lease, poll)
	waitForConnections(t, db, 4, "a waiter's per leading process")
	const kept = 2
	for i, f := range followers {
		if i != kept {
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitForConnections(t, db, 1, "the waiter's on the bell of the one process still followed")
	if waits := waitsOnBells(t, db, 1); waits[0].bell != bellOf(t, db, leaders[kept].Process()) {
		t.Fatalf("the waiter left waits on %s, want the bell of %s", waits[0].bell, leaders[kept].Process())
	}
	took := handOver(t, leaders[kept], followers[kept], poll, "the waiter on the bell of its leading process should have woken the follower")
	t.Logf("handover from %s took %v", leaders[kept].Process(), took)
}

// TestAWaiterFollowsAHolderRestartedUnderItsName has a store follow a
// flag led by the process h-b, which crashes (its bell goes: here its
// store is closed, which closes the bell's connection; its row stays
// held), and a new process starts under the same name, leading another
// flag that the store follows too: the waiter, after pauses on the silent
// bell, waits on the restarted process's bell, whose release then reaches
// the follower well before its poll.
func TestAWaiterFollowsAHolderRestartedUnderItsName(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	const lease, poll = 30 * time.Second, 5 * time.Second
	store, crashed := newStore(t, openDB(t, dsn)), newStore(t, openDB(t, dsn))
	if !buildFlag(t, crashed, "b", "h-b", lease, poll).Raised() || buildFlag(t, store, "b", "f", lease, poll).Raised() {
		t.Fatal("flag b: h-b should lead, the store follow")
	}
	admin := openDB(t, dsn)
	bellConnection(t, admin, "h-b")
	waitsOnBells(t, admin, 1)
	crashed.Close()
	time.Sleep(time.Second) // the waiter has found the bell silent
	if store.HintsOtherProcesses() {
		t.Fatal("the store reports that releases of other processes wake it, with the only bell it follows silent")
	}
	leader := buildFlag(t, newStore(t, openDB(t, dsn)), "b-restarted", "h-b", lease, poll)
	follower := buildFlag(t, store, "b-restarted", "f", lease, poll)
	if !leader.Raised() || follower.Raised() {
		t.Fatal("flag b-restarted: the restarted h-b should lead, the store follow")
	}
	for deadline := time.Now().Add(10 * time.Second); !store.HintsOtherProcesses(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter does not wait on the restarted process's bell")
		}
	}
	took := handOver(t, leader, follower, poll, "the waiter on the restarted process's bell should have woken the follower")
	t.Logf("handover from the restarted h-b took %v", took)
}

// TestAFloodOfRingsWakesNoFlagAndCostsBoundedStatements rings a bell 200
// times in about a second from a connection of another user of the server (user-level locks
// need no privilege: anyone can take the bell of a holder whose store does
// not hold it, here one whose pool is too small for a bell, and release
// it again), while a flag waits on that holder: no ring wakes the flag
// (its row stays held), and the waiter looks at the rows at most once per
// 0.1 s, whatever the rings.
func TestAFloodOfRingsWakesNoFlagAndCostsBoundedStatements(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	ctx := context.Background()
	capped := openDB(t, dsn)
	capped.SetMaxOpenConns(2)
	leading := newStore(t, capped)
	if err := leading.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := leading.Acquire(ctx, leadership.Request{Name: "flood", Holder: "quiet", Lease: time.Minute}); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	admin := openDB(t, dsn)
	spoofer, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer spoofer.Close()
	bell := bellOf(t, admin, "quiet")
	var got int
	if err := spoofer.QueryRowContext(ctx, `SELECT GET_LOCK(?, 0)`, bell).Scan(&got); err != nil || got != 1 {
		t.Fatalf("take the bell: %d, %v", got, err)
	}
	store := newStore(t, openDB(t, dsn))
	woken, unsubscribe := store.NotifyReleases("flood")
	defer unsubscribe()
	if lost, err := store.Acquire(ctx, leadership.Request{Name: "flood", Holder: "follower", Lease: time.Minute}); err != nil || lost.Acquired {
		t.Fatalf("the follower's Acquire = %+v, %v; want a loss to quiet", lost, err)
	}
	waitsOnBells(t, admin, 1)
	before, began := store.WatchStatements(), time.Now()
	for range 200 {
		// RELEASE_LOCK grants the bell to the waiter, which passes it
		// back at once: the GET_LOCK of the same statement waits for it.
		if err := spoofer.QueryRowContext(ctx, `SELECT RELEASE_LOCK(?) + GET_LOCK(?, 5)`, bell, bell).Scan(&got); err != nil || got != 2 {
			t.Fatalf("ring: %d, %v", got, err)
		}
		time.Sleep(5 * time.Millisecond) // the waiter waits again
	}
	lasted := time.Since(began)
	time.Sleep(300 * time.Millisecond)
	sent := store.WatchStatements() - before
	t.Logf("200 rings in %v: the waiter sent %d statements", lasted, sent)
	if bound := 3 * (int64((lasted+300*time.Millisecond)/(100*time.Millisecond)) + 3); sent > bound {
		t.Errorf("the waiter sent %d statements for 200 rings in %v; want at most %d: one look per 0.1 s", sent, lasted, bound)
	}
	select {
	case <-woken:
		t.Fatal("a ring woke the flag, whose row is still held")
	default:
	}
}

// connectionsInUse samples db's connections in use for half a second and
// returns the fewest and the most.
func connectionsInUse(t *testing.T, db *sql.DB) (least, most int) {
	t.Helper()
	least = 1 << 30
	for range 20 {
		n := db.Stats().InUse
		least, most = min(least, n), max(most, n)
		time.Sleep(25 * time.Millisecond)
	}
	t.Logf("connections in use: %d to %d", least, most)
	return least, most
}

// waitForConnections fails the test unless db has want connections in use
// within 5 s. why says which.
func waitForConnections(t *testing.T, db *sql.DB, want int, why string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for db.Stats().InUse != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections in use, want %d: %s", db.Stats().InUse, want, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bellOf is the name of the bell of holder in db's database.
func bellOf(t *testing.T, db *sql.DB, holder string) string {
	t.Helper()
	var name string
	if err := db.QueryRow(`SELECT DATABASE()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return mysql.BellName(name, holder)
}

// bellConnection returns the id of the connection that holds the bell of
// holder, once its store has taken it.
func bellConnection(t *testing.T, db *sql.DB, holder string) int64 {
	t.Helper()
	bell := bellOf(t, db, holder)
	var owner sql.NullInt64
	for deadline := time.Now().Add(5 * time.Second); !owner.Valid; time.Sleep(10 * time.Millisecond) {
		if err := db.QueryRow(`SELECT IS_USED_LOCK(?)`, bell).Scan(&owner); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store of %s did not take its bell", holder)
		}
	}
	return owner.Int64
}

// wait is a waiter's wait in progress: its connection and the bell.
type wait struct {
	id   int64
	bell string
}

// waitsOnBells returns the waits on bells in progress in db's database
// (the waiters'), once there are n, sorted by bell.
func waitsOnBells(t *testing.T, db *sql.DB, n int) []wait {
	t.Helper()
	const prefix = "SELECT CASE WHEN IS_USED_LOCK('"
	var waits []wait
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rows, err := db.Query(`SELECT id, info FROM information_schema.processlist
WHERE db = DATABASE() AND info LIKE 'SELECT CASE WHEN IS_USED_LOCK(%' AND state LIKE '%lock%'`)
		if err != nil {
			t.Fatal(err)
		}
		waits = waits[:0]
		for rows.Next() {
			var w wait
			var info string
			if err := rows.Scan(&w.id, &info); err != nil {
				t.Fatal(err)
			}
			w.bell, _, _ = strings.Cut(strings.TrimPrefix(info, prefix), "'")
			waits = append(waits, w)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if len(waits) == n {
			slices.SortFunc(waits, func(a, b wait) int { return strings.Compare(a.bell, b.bell) })
			return waits
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waits on bells in progress, want %d", len(waits), n)
		}
	}
}

// TestRingsOfReleasesInAFewBatchesWakeTheirFollowersAtOnce releases
// three flags of one holder 10 ms apart, as a process closing its flags
// releases them in a few batches, each ringing the bell, while a store of
// another process follows the three: each ring makes the waiter look, so
// each follower is woken soon after its release. A waiter spacing every
// look 0.1 s after the last one woke the second and third only 0.1 s
// after the first look, in every round; a loaded server may slow one
// round past the bound, so the test fails when three rounds in a row do.
func TestRingsOfReleasesInAFewBatchesWakeTheirFollowersAtOnce(t *testing.T) {
	t.Parallel()
	for round := 1; ; round++ {
		late := ringsOfReleases(t)
		if late == "" {
			return
		}
		if round == 3 {
			t.Fatalf("in three rounds of releases: %s", late)
		}
		t.Logf("round %d: %s; again", round, late)
	}
}

// ringsOfReleases is one round of
// TestRingsOfReleasesInAFewBatchesWakeTheirFollowersAtOnce, on a database
// of its own: it says which follower was not woken 80 ms after the first
// release, or returns "".
func ringsOfReleases(t *testing.T) string {
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	ctx := context.Background()
	leading, following := newStore(t, openDB(t, dsn)), newStore(t, openDB(t, dsn))
	if err := leading.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	names := []string{"first", "second", "third"}
	versions := make([]int64, len(names))
	woken := make([]<-chan struct{}, len(names))
	for i, n := range names {
		res, err := leading.Acquire(ctx, leadership.Request{Name: n, Holder: "p", Lease: time.Minute})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire %s = %+v, %v", n, res, err)
		}
		versions[i] = res.Version
		ch, stop := following.NotifyReleases(n)
		t.Cleanup(stop)
		woken[i] = ch
		if lost, err := following.Acquire(ctx, leadership.Request{Name: n, Holder: "f", Lease: time.Minute}); err != nil || lost.Acquired {
			t.Fatalf("the follower's Acquire of %s = %+v, %v; want a loss to p", n, lost, err)
		}
	}
	bellConnection(t, openDB(t, dsn), "p")
	waitsOnBells(t, openDB(t, dsn), 1)
	for _, ch := range woken { // the first look woke nothing: no row was free
		select {
		case <-ch:
		default:
		}
	}
	released := make([]time.Time, len(names))
	for i, n := range names {
		if i > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		released[i] = time.Now()
		if ok, err := leading.Release(ctx, n, "p", versions[i]); err != nil || !ok {
			t.Fatalf("Release %s = %v, %v", n, ok, err)
		}
	}
	for i, ch := range woken {
		select {
		case <-ch:
			t.Logf("%s: woken %v after the first release, %v after its own", names[i], time.Since(released[0]), time.Since(released[i]))
		case <-time.After(time.Until(released[0].Add(80 * time.Millisecond))):
			return fmt.Sprintf("%s: not woken 80 ms after the first release", names[i])
		}
	}
	return ""
}

// TestTwoFlagsOfOneNameOnOneStoreRunNoWaiter builds two flags of one name
// on one store under one holder name (the default name is the
// process's): the follower loses to a term of its own store, whose
// release wakes it in the process, so no waiter is started for it. A
// store that moved the name to a waiter on its own holder name at each
// attempt of the follower, and back at each of the leader's, opened and
// discarded a connection at every attempt.
func TestTwoFlagsOfOneNameOnOneStoreRunNoWaiter(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	// A poll long enough that a handover by the follower's next attempt
	// rather than by the release seldom comes within the bound below.
	const lease, poll = 20 * time.Second, 4 * time.Second
	store := newStore(t, openDB(t, dsn))
	leader := buildFlag(t, store, "twins", "", lease, poll)
	follower := buildFlag(t, store, "twins", "", lease, poll)
	if !leader.Raised() || follower.Raised() {
		t.Fatal("the first flag should lead, the second follow")
	}
	time.Sleep(9 * time.Second) // two attempts of the follower, and renewals of the leader
	if n := store.WatchStatements(); n != 0 {
		t.Errorf("the store's waiters sent %d statements, want none: the follower waits on its own store", n)
	}
	closed := time.Now()
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lease)
	defer cancel()
	if err := follower.Wait(ctx); err != nil {
		t.Fatalf("the follower did not take over: %v", err)
	}
	if took := time.Since(closed); took > poll/5 {
		t.Errorf("handover took %v; the release in the store should have woken the follower before its %v poll", took, poll)
	}
}

// waitLength returns how many seconds the waiter's wait in progress in
// db's database asks GET_LOCK for, and false when no waiter waits now.
func waitLength(t *testing.T, db *sql.DB) (int, bool) {
	t.Helper()
	var info string
	err := db.QueryRow(`SELECT info FROM information_schema.processlist
WHERE db = DATABASE() AND info LIKE 'SELECT CASE WHEN IS_USED_LOCK(%' AND state LIKE '%lock%' LIMIT 1`).Scan(&info)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	// … GET_LOCK('<bell>', <seconds>) END
	_, after, _ := strings.Cut(info, "', ")
	seconds, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(after), ") END"))
	if err != nil {
		t.Fatalf("the wait %q: %v", info, err)
	}
	return seconds, true
}

// TestAWaiterWaitsLongAgainAfterAWaitCutOnce kills the waiter's
// connection 3 s into its wait (as a server restart or a network failure
// does): its next waits are shorter, as after a timeout, but grow back
// while they end normally, towards the 5 minutes of an idle follower's
// one statement. A waiter that kept waiting 1 s at a time sent one
// statement a second for the store's life.
func TestAWaiterWaitsLongAgainAfterAWaitCutOnce(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	const lease, poll = 30 * time.Second, 5 * time.Second
	leader := buildFlag(t, newStore(t, openDB(t, dsn)), "cut", "l", lease, poll)
	follower := buildFlag(t, newStore(t, openDB(t, dsn)), "cut", "f", lease, poll)
	if !leader.Raised() || follower.Raised() {
		t.Fatal("the first flag should lead, the second follow")
	}
	admin := openDB(t, dsn)
	waits := waitsOnBells(t, admin, 1)
	if n, _ := waitLength(t, admin); n != 300 {
		t.Fatalf("the first wait asks for %d s, want 300", n)
	}
	time.Sleep(3 * time.Second)
	if _, err := admin.Exec(`KILL ?`, waits[0].id); err != nil {
		t.Fatal(err)
	}
	var seen []int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if n, ok := waitLength(t, admin); ok && (len(seen) == 0 || seen[len(seen)-1] != n) {
			seen = append(seen, n)
		}
		if len(seen) > 0 && seen[len(seen)-1] >= 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waits after the cut asked for %v s: they do not grow back", seen)
		}
	}
	t.Logf("the waits after the cut asked for %v s", seen)
}

// TestAWaiterKeepsItsWaitsBelowATimeoutThatCutsThemTwice gives the
// follower's pool readTimeout=3s: the first wait is cut at 3 s, the
// waits that follow grow back until one is cut again after the same 3 s,
// which shows a timeout; from then on every wait stays below it (one
// second), instead of being cut, and its connection opened again, at
// every other wait.
func TestAWaiterKeepsItsWaitsBelowATimeoutThatCutsThemTwice(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	const lease, poll = 30 * time.Second, 5 * time.Second
	leader := buildFlag(t, newStore(t, openDB(t, dsn)), "timeout", "l", lease, poll)
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ReadTimeout = 3 * time.Second
	store := newStore(t, openDB(t, cfg.FormatDSN()))
	follower := buildFlag(t, store, "timeout", "f", lease, poll)
	if !leader.Raised() || follower.Raised() {
		t.Fatal("the first flag should lead, the second follow")
	}
	// 300 s cut at 3 s, a pause of 1 s, then 1 s, 2 s and 4 s cut at 3 s
	// (at about 10 s), a pause of 1 s: from then on, 1 s at a time. 15 s:
	// also on a loaded server.
	admin := openDB(t, dsn)
	time.Sleep(15 * time.Second)
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if n, ok := waitLength(t, admin); ok && n >= 3 {
			t.Fatalf("a wait asks for %d s, after two waits were cut at the read timeout of 3 s", n)
		}
	}
	took := handOver(t, leader, follower, poll, "the waiter should have woken the follower")
	t.Logf("handover took %v; the waiter sent %d statements", took, store.WatchStatements())
}
