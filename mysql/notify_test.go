package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testdb"
	"github.com/dbflag/leadership/mysql"
)

// buildFlag builds a flag named name on store with a poll interval long
// enough that a handover well before it came from the release hint.
func buildFlag(t *testing.T, store *mysql.Store, name string, lease, poll time.Duration) *leadership.Flag {
	t.Helper()
	f, err := leadership.NewFlag().Store(store).Name(name).Lease(lease).PollInterval(poll).Build(context.Background())
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// buildProcessFlag builds a flag named name on store as buildFlag does,
// under the process name process (the default when empty).
func buildProcessFlag(t *testing.T, store *mysql.Store, name, process string, lease, poll time.Duration) *leadership.Flag {
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

// TestAReleaseWakesAFollowerOfAnotherProcessBeforeItsPoll builds a leader
// and a follower, each on a *sql.DB of its own as two processes have, with
// a 5 s poll interval, and checks that the follower takes over well before
// its poll after the leader's Close: the release reached it through the

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

// leader's bell and the follower's watcher.
func TestAReleaseWakesAFollowerOfAnotherProcessBeforeItsPoll(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		dsn := freshDatabase(t, testdb.MySQL(t), nil)
		const poll = 5 * time.Second
		stores := []*mysql.Store{newStore(t, openDB(t, dsn), opts...), newStore(t, openDB(t, dsn), opts...)}
		leader := buildFlag(t, stores[0], "handover", 30*time.Second, poll)
		if !leader.Raised() {
			t.Fatal("the first flag did not raise")
		}
		follower := buildFlag(t, stores[1], "handover", 30*time.Second, poll)
		if follower.Raised() {
			t.Fatal("the second flag raised while the first leads")
		}
		time.Sleep(300 * time.Millisecond) // the follower now waits out its poll
		for round := range 3 {
			took := handOver(t, leader, follower, poll, "the release hint should have woken the follower")
			t.Logf("round %d: handover took %v", round, took)
			// Back the other way: the follower's store now rings, the
			// leader's store (a new flag on it) listens.
			leader, follower = follower, buildFlag(t, stores[round%2], "handover", 30*time.Second, poll)
			time.Sleep(300 * time.Millisecond)
		}
	})
}

// TestACrashedHolderIsNoRelease acquires a flag for a holder that then
// "crashes": it never renews nor releases, and its bell's connection is
// killed. The follower's watcher hears the bell fall silent, but the wake
// is only a hint: no takeover happens before the row expires, and the
// watcher, finding the bell no longer held, leaves it alone instead of
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
	res, err := crashed.Acquire(ctx, leadership.Request{Name: "crash", Holder: "crashed", Lease: lease})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	acquired := time.Now()
	owner := bellOwner(t, openDB(t, dsn), "crashed")
	store := newStore(t, openDB(t, dsn))
	follower := buildFlag(t, store, "crash", lease, 500*time.Millisecond)
	if follower.Raised() {
		t.Fatal("the follower raised while the row is held")
	}
	time.Sleep(300 * time.Millisecond) // the watcher now waits on the bell
	sent, took := crash(t, openDB(t, dsn), owner, store, follower, acquired.Add(lease), nil)
	t.Logf("takeover %v after the acquire of a %v lease; the watcher sent %d statements meanwhile and heard %d rings",
		took, lease, sent, store.WatchRings())
	// About: the ring of the kill (RELEASE_LOCK, a look of three), then a
	// GET_LOCK and a RELEASE_LOCK at once and after pauses of 0.1 s,
	// 0.4 s, 1.6 s, 6.4 s, …: 12 in 4 s.
	if sent > 16 {
		t.Errorf("the watcher sent %d statements in %v: it should leave a silent bell alone", sent, took)
	}
}

// TestTheWatcherAndTheBellHoldOneConnectionEach checks a store that leads
// one flag and follows another, led by another process: at rest it holds
// two connections of its pool, the bell's and the watcher's, whatever
// the number of flags.
func TestTheWatcherAndTheBellHoldOneConnectionEach(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	db, otherDB := openDB(t, dsn), openDB(t, dsn)
	store, other := newStore(t, db), newStore(t, otherDB)
	const lease, poll = 30 * time.Second, 10 * time.Second
	for i := range 3 {
		name := string(rune('a' + i))
		if f := buildFlag(t, store, "led-"+name, lease, poll); !f.Raised() {
			t.Fatal("the store's own flag did not raise")
		}
		if f := buildFlag(t, other, "followed-"+name, lease, poll); !f.Raised() {
			t.Fatal("the other store's flag did not raise")
		}
		if f := buildFlag(t, store, "followed-"+name, lease, poll); f.Raised() {
			t.Fatal("the follower raised")
		}
	}
	time.Sleep(500 * time.Millisecond)
	least, most := connectionsInUse(t, db)
	if least != 2 || most > 3 {
		t.Errorf("connections in use: %d to %d, want 2 at rest (the bell's and the watcher's), 3 at most during an attempt", least, most)
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

// TestTheWatcherReconnects kills the watcher's connection, as a server
// restart or a network failure does, and checks that the watcher takes a
// new one: the next release still reaches the follower well before its
// poll.
func TestTheWatcherReconnects(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	const lease, poll = 30 * time.Second, 5 * time.Second
	leader := buildFlag(t, newStore(t, openDB(t, dsn)), "reconnect", lease, poll)
	store := newStore(t, openDB(t, dsn))
	follower := buildFlag(t, store, "reconnect", lease, poll)
	if !leader.Raised() || follower.Raised() {
		t.Fatal("the first flag should lead, the second follow")
	}
	admin := openDB(t, dsn)
	var id int64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := admin.QueryRow(`SELECT id FROM information_schema.processlist
WHERE db = DATABASE() AND info LIKE 'SELECT IS_USED_LOCK%'`).Scan(&id)
		if err == nil {
			break
		}
		if !errors.Is(err, sql.ErrNoRows) || time.Now().After(deadline) {
			t.Fatalf("find the watcher's connection: %v", err)
		}
	}
	if _, err := admin.Exec(`KILL ?`, id); err != nil {
		t.Fatalf("kill the watcher's connection %d: %v", id, err)
	}
	time.Sleep(2500 * time.Millisecond) // its pause of 1 s, then a new connection
	if !store.HintsOtherProcesses() {
		t.Fatal("the watcher stopped when its connection was killed")
	}
	took := handOver(t, leader, follower, poll, "the watcher should have reconnected and woken the follower")
	t.Logf("handover after the watcher's reconnection took %v", took)
}

// TestTheWatcherFollowsTheHolderItsFlagsWaitOn has a store follow two
// flags led by two other processes, under the holder names h-a and h-b,
// on a pool of three connections, which leaves room for the watcher and
// no helper: the watcher waits on the bell of h-a's store (the first by
// holder name on a tie). When its flag on h-a's row closes, no flag of
// the store waits on a holder of that store any more, and the watcher
// must move to the bell of h-b's store at once, not after its GET_LOCK
// times out: h-b's release then reaches the follower well before its
// poll.
func TestTheWatcherFollowsTheHolderItsFlagsWaitOn(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	const lease, poll = 30 * time.Second, 5 * time.Second
	build := func(store *mysql.Store, name, process string) *leadership.Flag {
		t.Helper()
		return buildProcessFlag(t, store, name, process, lease, poll)
	}
	build(newStore(t, openDB(t, dsn)), "a", "h-a")
	leaderB := build(newStore(t, openDB(t, dsn)), "b", "h-b")
	capped := openDB(t, dsn)
	capped.SetMaxOpenConns(3)
	store := newStore(t, capped)
	followerA := build(store, "a", "f")
	followerB := build(store, "b", "f")
	if followerA.Raised() || followerB.Raised() || !leaderB.Raised() {
		t.Fatal("the flags of h-a and h-b should lead, the store's follow")
	}
	time.Sleep(300 * time.Millisecond) // the watcher now waits on h-a's bell
	followerA.Close()
	time.Sleep(300 * time.Millisecond) // and, once moved, on h-b's
	took := handOver(t, leaderB, followerB, poll, "the watcher should have moved to h-b's bell and woken the follower")
	t.Logf("handover from h-b took %v", took)
}

// TestTheWatcherWaitsLessThanTheReadTimeout gives the follower's pool a
// DSN with readTimeout=3s, which cuts the watcher's first GET_LOCK: the
// watcher must then wait less than that, and a release a few seconds
// later still reaches the follower well before its poll.
func TestTheWatcherWaitsLessThanTheReadTimeout(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	const lease, poll = 30 * time.Second, 5 * time.Second
	leader := buildFlag(t, newStore(t, openDB(t, dsn)), "timeout", lease, poll)
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ReadTimeout = 3 * time.Second
	store := newStore(t, openDB(t, cfg.FormatDSN()))
	follower := buildFlag(t, store, "timeout", lease, poll)
	if !leader.Raised() || follower.Raised() {
		t.Fatal("the first flag should lead, the second follow")
	}
	// The first wait fails at 3 s, the watcher reconnects 1 s later and
	// waits 1 s at a time from then on.
	time.Sleep(8 * time.Second)
	took := handOver(t, leader, follower, poll, "the watcher should have waited less than the read timeout and woken the follower")
	t.Logf("handover with readTimeout=3s took %v; the watcher sent %d statements", took, store.WatchStatements())
}

// TestAFollowerIsWokenByEveryReleaseOfTheStoreItWaitsOn has one store lead
// three flags under the default process names, one per flag, and another
// store follow all three. Its watcher waits on one bell, the leading
// store's, which every release of that store rings: each of the three
// handovers comes well before the follower's poll, in whatever order the
// flags close (here the holder names in descending order, the reverse of
// the order a watcher that waits on one holder name would choose).
func TestAFollowerIsWokenByEveryReleaseOfTheStoreItWaitsOn(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		dsn := freshDatabase(t, testdb.MySQL(t), nil)
		const lease, poll = 30 * time.Second, 5 * time.Second
		leading, following := newStore(t, openDB(t, dsn), opts...), newStore(t, openDB(t, dsn), opts...)
		type pair struct{ leader, follower *leadership.Flag }
		var pairs []pair
		for _, name := range []string{"a", "b", "c"} {
			leader := buildFlag(t, leading, name, lease, poll)
			follower := buildFlag(t, following, name, lease, poll)
			if !leader.Raised() || follower.Raised() {
				t.Fatalf("flag %s: the leading store's flag should lead, the other follow", name)
			}
			pairs = append(pairs, pair{leader, follower})
		}
		sort.Slice(pairs, func(i, j int) bool { return pairs[i].leader.Process() > pairs[j].leader.Process() })
		time.Sleep(300 * time.Millisecond) // the watcher now waits on the leading store's bell
		for _, p := range pairs {
			took := handOver(t, p.leader, p.follower, poll, "the leading store's bell should have woken the follower")
			t.Logf("handover from %s took %v", p.leader.Process(), took)
		}
	})
}

// TestAShutdownWakesTheFollowersOfEveryFlag has one store lead eight
// flags under default process names and another store follow them, then
// closes the eight leaders one right after the other, as a process does
// when it shuts down: the releases ring the leading store's bell in quick
// succession, and every follower must raise well before its poll. A
// watcher that waits again between a ring and the holder's retake of its
// bell would find it silent and miss the rings that follow.
func TestAShutdownWakesTheFollowersOfEveryFlag(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		dsn := freshDatabase(t, testdb.MySQL(t), nil)
		const lease, poll = 30 * time.Second, 5 * time.Second
		leading, following := newStore(t, openDB(t, dsn), opts...), newStore(t, openDB(t, dsn), opts...)
		var leaders, followers []*leadership.Flag
		for i := range 8 {
			name := string(rune('a' + i))
			leaders = append(leaders, buildFlag(t, leading, name, lease, poll))
			followers = append(followers, buildFlag(t, following, name, lease, poll))
			if !leaders[i].Raised() || followers[i].Raised() {
				t.Fatalf("flag %s: the leading store's flag should lead, the other follow", name)
			}
		}
		time.Sleep(300 * time.Millisecond) // the watcher now waits on the leading store's bell
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
			took := time.Since(closed)
			slowest = max(slowest, took)
			if took > time.Second {
				t.Errorf("follower %d raised %v after the shutdown began; the leading store's bell should have woken it, well before its %v poll", i, took, poll)
			}
		}
		t.Logf("the eight followers raised within %v of the shutdown's start", slowest)
	})
}

// TestABellFoundFreeMakesTheWatcherLookAtTheRows has a watcher wait on a
// bell nobody holds, as when the leading store gave its bell up right
// after its last release, while the watcher was still reading the rows
// after the ring before: the watcher looks at the rows once more, and
// wakes the flag whose row is free, instead of only pausing on a silent
// bell. (The pool is capped at two connections, so that the store runs
// no watcher of its own beside the one the test runs.)
func TestABellFoundFreeMakesTheWatcherLookAtTheRows(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	capped := func() *mysql.Store {
		db := openDB(t, dsn)
		db.SetMaxOpenConns(2)
		return newStore(t, db)
	}
	leading, store := capped(), capped()
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
	if ok, err := leading.Release(ctx, "freed", "gone", res.Version); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	const nobody = 1 << 40 // no connection has this id: the bell is free
	if err := store.WaitOnceOnBell(ctx, "gone", nobody); err != nil {
		t.Fatalf("wait on a free bell: %v", err)
	}
	select {
	case <-woken:
	case <-time.After(time.Second):
		t.Fatal("the watcher found the bell free and did not wake the flag whose row is free")
	}
}

// unwatchedFollower builds a flag "a" on a store of its own, which leads,
// and a flag "a" on a store whose pool is capped at two connections, so
// that it runs no watcher of its own beside one a test runs, which
// follows. It returns the leader and the following store.
func unwatchedFollower(t *testing.T, dsn string) (*leadership.Flag, *mysql.Store) {
	t.Helper()
	capped := openDB(t, dsn)
	capped.SetMaxOpenConns(2)
	leading, following := newStore(t, openDB(t, dsn)), newStore(t, capped)
	leader := buildFlag(t, leading, "a", time.Minute, 5*time.Second)
	if follower := buildFlag(t, following, "a", time.Minute, 5*time.Second); !leader.Raised() || follower.Raised() {
		t.Fatal("the leading store's flag should lead, the other follow")
	}
	return leader, following
}

// TestAWatcherKeepsItsBellWhileTheHoldersLeftAreSilent: when every holder
// its flags still wait on was found without its nameplate (a new holder
// takes its nameplate just after its first acquire returns, and under load
// the watcher's lookup can come first), the watcher keeps the bell it
// waited on last instead of waiting on none, which would miss that
// store's releases until the flags' poll. (Seen once in the full suite
// under -race: two of the eight followers of
// TestAShutdownWakesTheFollowersOfEveryFlag raised at their 5 s poll.)
func TestAWatcherKeepsItsBellWhileTheHoldersLeftAreSilent(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	leader, following := unwatchedFollower(t, dsn)
	const last = 4242 // the bell waited on last, by its store's connection id
	id, err := following.TargetAfterSilence(context.Background(), last, leader.Process())
	if err != nil {
		t.Fatal(err)
	}
	if id != last {
		t.Fatalf("the watcher chose the bell %d when the only holder its flag waits on was found silent; want the bell it waited on last, %d", id, last)
	}
}

// TestAWaitOnABellOutlivesSilentHolders: while the only holder its flag
// waits on is paused (its nameplate found free), the watcher's wait on
// the bell it chose is not cut short when a flag's holder changes (the
// holder is presumed of that bell, as a holder not yet looked up is), and
// it ends by itself when the pause ends (after at least 1 s), so that the
// holder is looked up again, instead of after bellWait (5 min).
func TestAWaitOnABellOutlivesSilentHolders(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	leader, following := unwatchedFollower(t, dsn)
	// A bell the test holds, so that a wait on it blocks.
	const id = 4242
	ctx := context.Background()
	conn, err := openDB(t, dsn).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var got int
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 0)`, mysql.StoreBellName(id)).Scan(&got); err != nil || got != 1 {
		t.Fatalf("GET_LOCK = %d, %v", got, err)
	}
	cut, lasted, err := following.WaitWithSilentHolders(ctx, id, 20*time.Second, leader.Process())
	if err != nil {
		t.Fatal(err)
	}
	if cut {
		t.Fatal("the wait was cut short while the only holder waited on was paused; want it kept")
	}
	if lasted > 10*time.Second { // generous: about 1 s
		t.Fatalf("the wait lasted %v with a holder paused for 0.1 s; want it to end with the pause (at least 1 s), not after bellWait", lasted)
	}
	t.Logf("the wait ended by itself after %v", lasted)
}

// followStores builds n leading stores, each a process of its own with one
// flag under its default process name, and one store that follows the n
// flags. It returns the leaders, the followers in the same order, the
// follower's store and its pool.
func followStores(t *testing.T, n int, lease, poll time.Duration) (leaders, followers []*leadership.Flag, following *mysql.Store, db *sql.DB) {
	t.Helper()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	db = openDB(t, dsn)
	following = newStore(t, db)
	for i := range n {
		name := string(rune('a' + i))
		leader, follower := buildFlag(t, newStore(t, openDB(t, dsn)), name, lease, poll), buildFlag(t, following, name, lease, poll)
		if !leader.Raised() || follower.Raised() {
			t.Fatalf("flag %s: the leading store's flag should lead, the other follow", name)
		}
		leaders, followers = append(leaders, leader), append(followers, follower)
	}
	return leaders, followers, following, db
}

// watchersLeader returns the index of the leader among leaders whose
// store's bell the watcher of store waits on, once it waits on one of
// them; the others' are its helpers'.
func watchersLeader(t *testing.T, store *mysql.Store, db *sql.DB, leaders []*leadership.Flag) int {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		bell := store.FollowedBells()[0]
		for i, l := range leaders {
			if bellOwner(t, db, l.Process()) == bell {
				return i
			}
		}
	}
	t.Fatalf("the watcher waits on none of the leading stores' bells: %v", store.FollowedBells())
	return -1
}

// TestAFollowerHearsTheReleasesOfEveryStoreItWaitsOn has one store follow
// four flags, each led by a process of its own, and closes the leaders one
// after the other, the one whose bell the watcher waits on last: the
// store waits on the bells of the four leading stores at once (the
// watcher's and three helpers', one connection each), so every handover
// comes well before the follower's poll. Then the store leads the four
// flags, and the helpers' connections are back in the pool: two stay in
// use, the bell's and the watcher's.
func TestAFollowerHearsTheReleasesOfEveryStoreItWaitsOn(t *testing.T) {
	t.Parallel()
	const lease, poll = 30 * time.Second, 5 * time.Second
	leaders, followers, store, db := followStores(t, 4, lease, poll)
	waitForConnections(t, db, 4, "the watcher's and its three helpers'")
	last := watchersLeader(t, store, db, leaders)
	leaders = append(slices.Delete(slices.Clone(leaders), last, last+1), leaders[last])
	followers = append(slices.Delete(slices.Clone(followers), last, last+1), followers[last])
	for i := range leaders {
		took := handOver(t, leaders[i], followers[i], poll, "the bell of its leading store should have woken the follower")
		t.Logf("handover from %s took %v", leaders[i].Process(), took)
	}
	waitForConnections(t, db, 2, "the bell's and the watcher's; the helpers' should be back in the pool")
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

// TestAHelperLeavesACrashedStoreAlone has a store follow three flags: two
// led by one process (the watcher's bell) and one by another, followed by
// a helper, which then "crashes": its bell's connection is killed and its
// row is never renewed nor released. The helper hears the bell fall
// silent and ends, without a busy loop on the silent bell: no takeover
// before the row expires, a few statements meanwhile, and once the row is
// taken over only the watcher's connection and the new bell's stay in use.
func TestAHelperLeavesACrashedStoreAlone(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	ctx := context.Background()
	const lease, poll = 4 * time.Second, 500 * time.Millisecond
	leading := newStore(t, openDB(t, dsn))
	db := openDB(t, dsn)
	store := newStore(t, db)
	for _, name := range []string{"a", "b"} {
		if f := buildFlag(t, leading, name, 30*time.Second, poll); !f.Raised() {
			t.Fatal("the leading store's flag did not raise")
		}
		if f := buildFlag(t, store, name, 30*time.Second, poll); f.Raised() {
			t.Fatal("the follower raised")
		}
	}
	crashed := newStore(t, openDB(t, dsn))
	res, err := crashed.Acquire(ctx, leadership.Request{Name: "crash", Holder: "crashed", Lease: lease})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	acquired := time.Now()
	owner := bellOwner(t, openDB(t, dsn), "crashed")
	follower := buildFlag(t, store, "crash", lease, poll)
	if follower.Raised() {
		t.Fatal("the follower raised while the row is held")
	}
	waitForConnections(t, db, 2, "the watcher's and its helper's")
	sent, took := crash(t, openDB(t, dsn), owner, store, follower, acquired.Add(lease), func() {
		waitForConnections(t, db, 1, "the watcher's; the helper should end once it finds the crashed store's bell silent")
		if time.Until(acquired.Add(lease)) < 0 {
			t.Fatal("the helper ended after the crashed holder's row expired; want at once")
		}
	})
	t.Logf("takeover %v after the acquire of a %v lease; the watcher and its helper sent %d statements meanwhile",
		took, lease, sent)
	// About: the ring of the kill (RELEASE_LOCK, a look of three), the
	// bell found free (GET_LOCK, RELEASE_LOCK, a look of three), then a
	// lookup on the pool after pauses of 0.1 s, 0.4 s, 1.6 s: 13 in 4 s.
	if sent > 20 {
		t.Errorf("the watcher and its helper sent %d statements in %v: they should leave a silent bell alone", sent, took)
	}
	waitForConnections(t, db, 2, "the watcher's and the bell of the flag taken over; the helper's should be back in the pool")
}

// crash kills the connection owner (the bell's of a holder's store, as
// its crash does) through admin, calls meanwhile unless nil, waits for
// follower, a flag of store, to take the row over, and fails the test if
// it did so before expires, the end of the crashed holder's lease. It
// returns how many statements store's watcher and helpers sent from the
// kill to the takeover, and how long that took.
func crash(t *testing.T, admin *sql.DB, owner int64, store *mysql.Store, follower *leadership.Flag, expires time.Time, meanwhile func()) (sent int64, took time.Duration) {
	t.Helper()
	before, killed := store.WatchStatements(), time.Now()
	if _, err := admin.Exec(`KILL ?`, owner); err != nil {
		t.Fatalf("kill the bell's connection %d: %v", owner, err)
	}
	if meanwhile != nil {
		meanwhile()
	}
	if err := follower.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if early := time.Until(expires); early > 0 {
		t.Fatalf("the follower took over %v before the crashed holder's row expired", early)
	}
	return store.WatchStatements() - before, time.Since(killed)
}

// bellOwner returns the connection id of the owner of the nameplate of
// holder, once its store has taken it.
func bellOwner(t *testing.T, db *sql.DB, holder string) int64 {
	t.Helper()
	var dbName string
	if err := db.QueryRow(`SELECT DATABASE()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	var owner sql.NullInt64
	for deadline := time.Now().Add(5 * time.Second); !owner.Valid; time.Sleep(10 * time.Millisecond) {
		if err := db.QueryRow(`SELECT IS_USED_LOCK(?)`, mysql.BellName(dbName, holder)).Scan(&owner); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store of %s did not take its nameplate", holder)
		}
	}
	return owner.Int64
}

// TestTheWatcherFollowsFourStoresAtMost has one store follow six flags,
// each led by a process of its own: at rest its watcher and helpers wait
// on four different bells, each a leading store's, and hold four
// connections of the pool (one per leading store they follow, no more),
// and the flags of the two stores not followed still take over at their
// poll.
func TestTheWatcherFollowsFourStoresAtMost(t *testing.T) {
	t.Parallel()
	const lease, poll = 30 * time.Second, 2 * time.Second
	leaders, followers, store, db := followStores(t, 6, lease, poll)
	time.Sleep(500 * time.Millisecond)
	least, most := connectionsInUse(t, db)
	if least != 4 || most > 5 {
		t.Errorf("connections in use: %d to %d, want 4 at rest (a watcher's per leading store, four at most), 5 at most during an attempt", least, most)
	}
	leadingBells := make(map[int64]bool)
	for _, l := range leaders {
		leadingBells[bellOwner(t, db, l.Process())] = true
	}
	bells := store.FollowedBells()
	followed := make(map[int64]bool)
	for _, id := range bells {
		if !leadingBells[id] || followed[id] {
			t.Fatalf("followed bells %v: want four different bells of the leading stores %v", bells, leadingBells)
		}
		followed[id] = true
	}
	if len(followed) != 4 {
		t.Fatalf("followed bells %v: want four", bells)
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

// TestAHelperStopsWhenNoFlagWaitsOnItsStore has a store follow four flags,
// each led by a process of its own, then closes three of its four flags
// while their leaders go on leading, the flag on the store the watcher
// waits on among them: the watcher and the helpers of those stores stop
// waiting on their bells and give their connections back (one stays in
// use, the last helper's), and a release by the fourth store still wakes
// the last flag, through that helper, well before its poll.
func TestAHelperStopsWhenNoFlagWaitsOnItsStore(t *testing.T) {
	t.Parallel()
	const lease, poll = 30 * time.Second, 5 * time.Second
	leaders, followers, store, db := followStores(t, 4, lease, poll)
	waitForConnections(t, db, 4, "the watcher's and its three helpers'")
	kept := (watchersLeader(t, store, db, leaders) + 1) % len(leaders) // a helper's
	helped := bellOwner(t, db, leaders[kept].Process())
	for i, f := range followers {
		if i == kept {
			continue
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	waitForConnections(t, db, 1, "the helper's on the bell of the one store still followed")
	if bells := store.FollowedBells(); len(bells) != 2 || bells[0] != 0 || bells[1] != helped {
		t.Fatalf("followed bells %v, want [0 %d]: no bell for the watcher (the one left is a helper's), one helper", bells, helped)
	}
	took := handOver(t, leaders[kept], followers[kept], poll, "the helper on the bell of its leading store should have woken the follower")
	t.Logf("handover from %s took %v", leaders[kept].Process(), took)
}

// TestAHelperFollowsAStoreRestartedUnderItsHolderName has a store follow
// three flags: two led by one process (the watcher's bell), one by
// another under the process name h-b (a helper's bell). That process
// crashes (its bell's connection is killed; its row stays held) and a new
// one starts under the same process name, leading another flag: once its
// store holds the nameplate of h-b, a helper waits on its bell, found by
// looking the nameplate up again after the pause the silent bell began,
// while the watcher goes on waiting on its own.
func TestAHelperFollowsAStoreRestartedUnderItsHolderName(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	const lease, poll = 30 * time.Second, 5 * time.Second
	build := func(store *mysql.Store, name, process string) *leadership.Flag {
		t.Helper()
		return buildProcessFlag(t, store, name, process, lease, poll)
	}
	leading := newStore(t, openDB(t, dsn))
	db := openDB(t, dsn)
	store := newStore(t, db)
	for _, name := range []string{"a1", "a2"} {
		if !build(leading, name, "").Raised() || build(store, name, "").Raised() {
			t.Fatalf("flag %s: the leading store's flag should lead, the other follow", name)
		}
	}
	if !build(newStore(t, openDB(t, dsn)), "b", "h-b").Raised() || build(store, "b", "").Raised() {
		t.Fatal("flag b: h-b should lead, the store follow")
	}
	waitForConnections(t, db, 2, "the watcher's and its helper's")
	crashed := bellOwner(t, db, "h-b")
	if bells := store.FollowedBells(); len(bells) != 2 || bells[1] != crashed {
		t.Fatalf("followed bells %v: want the watcher's and a helper's on h-b's store's bell, %d", bells, crashed)
	}
	watcherBell := store.FollowedBells()[0]
	if _, err := openDB(t, dsn).Exec(`KILL ?`, crashed); err != nil {
		t.Fatalf("kill the bell's connection %d: %v", crashed, err)
	}
	time.Sleep(time.Second) // the helper has found the bell silent
	if !build(newStore(t, openDB(t, dsn)), "b-restarted", "h-b").Raised() {
		t.Fatal("the restarted process's flag did not raise")
	}
	restarted := bellOwner(t, db, "h-b")
	deadline := time.Now().Add(10 * time.Second)
	for bells := store.FollowedBells(); len(bells) != 2 || bells[0] != watcherBell || bells[1] != restarted; bells = store.FollowedBells() {
		if time.Now().After(deadline) {
			t.Fatalf("followed bells %v: want [%d %d], the watcher's and a helper's on the restarted store's bell", bells, watcherBell, restarted)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAHelperWaitsAgainAfterItsWaitIsKilled has a store follow two flags,
// each led by a process of its own, and kills the statement of the helper
// (KILL QUERY, as an administrator or a statement timeout does: GET_LOCK
// then returns NULL or fails): the helper waits again after its pause of
// 1 s, and a release by its store still wakes the follower well before its
// poll.
func TestAHelperWaitsAgainAfterItsWaitIsKilled(t *testing.T) {
	t.Parallel()
	const lease, poll = 30 * time.Second, 5 * time.Second
	leaders, followers, store, db := followStores(t, 2, lease, poll)
	waitForConnections(t, db, 2, "the watcher's and its helper's")
	helped := 1 - watchersLeader(t, store, db, leaders)
	bells := store.FollowedBells()
	if len(bells) != 2 || bells[1] != bellOwner(t, db, leaders[helped].Process()) {
		t.Fatalf("followed bells %v: want the watcher's and a helper's on the bell of %s", bells, leaders[helped].Process())
	}
	var waiting int64
	err := db.QueryRow(`SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE ?`,
		"%GET_LOCK('"+mysql.StoreBellName(bells[1])+"'%").Scan(&waiting)
	if err != nil {
		t.Fatalf("find the helper's wait: %v", err)
	}
	if _, err := db.Exec(`KILL QUERY ?`, waiting); err != nil {
		t.Fatalf("kill the helper's wait %d: %v", waiting, err)
	}
	time.Sleep(2500 * time.Millisecond) // its pause of 1 s, then a new wait
	took := handOver(t, leaders[helped], followers[helped], poll, "the helper should have waited again and woken the follower")
	t.Logf("handover after the helper's wait was killed took %v", took)
}
