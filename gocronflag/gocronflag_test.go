package gocronflag_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-co-op/gocron/v2"
	"go.uber.org/goleak"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/gocronflag"
	"github.com/dbflag/leadership/internal/testkit/faultstore"
	"github.com/dbflag/leadership/memstore"
)

// The tests run in virtual time (testing/synctest) on the in-memory store:
// the flags, the lockers and gocron's schedulers advance without real
// sleeps.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const lease = time.Second

type run struct {
	scheduler   int
	at          time.Time
	othersRaise bool // another scheduler's flag was raised when the run started
}

func TestElectorRunsJobsOnOneSchedulerAndMovesSafely(t *testing.T) {
	synctest.Test(t, testElectorMovesSafely)
}

func testElectorMovesSafely(t *testing.T) {
	db := memstore.New()
	cut := faultstore.Wrap(db)
	var flags []*leadership.Flag
	for i := range 3 {
		store := leadership.Store(cut)
		if i > 0 {
			store = db
		}
		f, err := leadership.NewFlag().Store(store).Name("jobs").Lease(lease).PollInterval(100 * time.Millisecond).Build(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		flags = append(flags, f)
	}
	var mu sync.Mutex
	var runs []run
	for i, f := range flags {
		s, err := gocron.NewScheduler(gocron.WithDistributedElector(gocronflag.Elector(f)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.NewJob(gocron.DurationJob(50*time.Millisecond), gocron.NewTask(func() {
			others := false
			for j, g := range flags {
				others = others || (j != i && g.Raised())
			}
			mu.Lock()
			runs = append(runs, run{scheduler: i, at: time.Now(), othersRaise: others})
			mu.Unlock()
		}))
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	time.Sleep(time.Second)
	cut.Fail(errors.New("leader cut off"))
	cutAt := time.Now()
	time.Sleep(lease + 2*time.Second)

	mu.Lock()
	defer mu.Unlock()
	var lastOld, firstNew time.Time
	for _, r := range runs {
		if r.othersRaise {
			t.Fatalf("scheduler %d ran at %v while another scheduler's flag was raised", r.scheduler, r.at)
		}
		if r.scheduler == 0 {
			lastOld = r.at
		} else if firstNew.IsZero() {
			firstNew = r.at
		}
	}
	if lastOld.IsZero() || firstNew.IsZero() {
		t.Fatalf("runs before the cut: %v, after: %v; want both", !lastOld.IsZero(), !firstNew.IsZero())
	}
	if !lastOld.Before(firstNew) {
		t.Fatalf("the old leader ran at %v, after the new leader's first run at %v", lastOld, firstNew)
	}
	if lastOld.Sub(cutAt) > lease {
		t.Fatalf("the old leader still ran %v after it was cut off, past its trust window", lastOld.Sub(cutAt))
	}
	if took := firstNew.Sub(cutAt); took > lease+time.Second {
		t.Fatalf("jobs resumed %v after the leader was cut off, want about one lease", took)
	}
	t.Logf("%d runs; the old leader's last run %v after the cut, the new leader's first %v after", len(runs), lastOld.Sub(cutAt), firstNew.Sub(cutAt))
}

func TestElectorNamesTheHolder(t *testing.T) {
	synctest.Test(t, testElectorNamesTheHolder)
}

func testElectorNamesTheHolder(t *testing.T) {
	db := memstore.New()
	a, err := leadership.NewFlag().Store(db).Name("n").Process("host-a").Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := leadership.NewFlag().Store(db).Name("n").Process("host-b").Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := gocronflag.Elector(a).IsLeader(context.Background()); err != nil {
		t.Fatalf("leader's IsLeader = %v", err)
	}
	err = gocronflag.Elector(b).IsLeader(context.Background())
	if !errors.Is(err, gocronflag.ErrNotLeader) || !strings.Contains(err.Error(), "host-a") {
		t.Fatalf("follower's IsLeader = %v, want ErrNotLeader naming host-a", err)
	}
}

func TestLockerExcludesConcurrentRuns(t *testing.T) {
	synctest.Test(t, testLockerExcludesConcurrentRuns)
}

func testLockerExcludesConcurrentRuns(t *testing.T) {
	db := memstore.New()
	type span struct {
		scheduler  int
		start, end time.Time
	}
	var mu sync.Mutex
	var spans []span
	for i := range 3 {
		locker, err := gocronflag.NewLocker(context.Background(), db, "scheduler-"+string(rune('a'+i)), 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.NewJob(gocron.DurationJob(100*time.Millisecond), gocron.NewTask(func() {
			start := time.Now()
			time.Sleep(30 * time.Millisecond)
			mu.Lock()
			spans = append(spans, span{i, start, time.Now()})
			mu.Unlock()
		}), gocron.WithName("report"))
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	time.Sleep(2 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(spans) < 3 {
		t.Fatalf("only %d runs in 2s", len(spans))
	}
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			if a.scheduler != b.scheduler && a.start.Before(b.end) && b.start.Before(a.end) {
				t.Fatalf("runs of schedulers %d and %d overlap", a.scheduler, b.scheduler)
			}
		}
	}
	t.Logf("%d runs in 2s, none overlapping", len(spans))
}

func TestNewLockerRejectsBadInput(t *testing.T) {
	if _, err := gocronflag.NewLocker(context.Background(), nil, "p", time.Second); !errors.Is(err, leadership.ErrInvalidArgument) {
		t.Errorf("nil store: %v", err)
	}
	s := memstore.New()
	if _, err := gocronflag.NewLocker(context.Background(), s, "", time.Second); !errors.Is(err, leadership.ErrInvalidArgument) {
		t.Errorf("empty process: %v", err)
	}
	if _, err := gocronflag.NewLocker(context.Background(), s, "p", 0); !errors.Is(err, leadership.ErrInvalidArgument) {
		t.Errorf("zero lease: %v", err)
	}
}

// Job names of any length and script map to distinct valid rows: a long
// name is not cut inside a UTF-8 character (a refused name would keep the
// job from ever running), two long names that share a prefix are two
// locks, and short names keep the row they always had.
func TestLockerMapsEveryKeyToItsOwnValidRow(t *testing.T) {
	s := memstore.New()
	locker, err := gocronflag.NewLocker(context.Background(), s, "host-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 300)
	keys := []string{
		"report",                       // short: unchanged
		strings.Repeat("é", 200),       // 400 bytes; a cut at 255 bytes splits an "é"
		strings.Repeat("日本", 60) + "x", // a cut splits a 3-byte character
		long + "-1",                    // two long keys with a common 300-byte prefix
		long + "-2",
		"trailing space ",         // refused as a row name as it stands
		"bad\xffutf8",             // likewise
		"tab\tinside",             // likewise
		"\u00e9t\u00e9",           // short multi-byte: unchanged
		strings.Repeat("b", 243),  // exactly MaxNameLength with the prefix: unchanged
		strings.Repeat("b", 244),  // one byte more
		strings.Repeat("b", 1000), // shares 243 bytes with the two above
	}
	// A short key that spells out what a long key maps to is still its own lock.
	keys = append(keys, strings.TrimPrefix(gocronflag.LockName(long+"-1"), gocronflag.LockPrefix))

	names := map[string]string{}
	for _, key := range keys {
		name := gocronflag.LockName(key)
		if err := leadership.ValidateName("lock name", name); err != nil {
			t.Errorf("LockName(%.40q…) = %q is not a valid row name: %v", key, name, err)
		}
		if !strings.HasPrefix(name, gocronflag.LockPrefix) {
			t.Errorf("LockName(%.40q…) = %q lacks the prefix %q", key, name, gocronflag.LockPrefix)
		}
		if other, dup := names[name]; dup {
			t.Errorf("keys %.40q… and %.40q… share the row %q", other, key, name)
		}
		names[name] = key
		lk, err := locker.Lock(context.Background(), key) // every lock is held at once
		if err != nil {
			t.Errorf("Lock(%.40q…) = %v", key, err)
			continue
		}
		t.Cleanup(func() { _ = lk.Unlock(context.Background()) })
	}
	for _, key := range []string{"report", "\u00e9t\u00e9", strings.Repeat("b", 243)} {
		if got, want := gocronflag.LockName(key), gocronflag.LockPrefix+key; got != want {
			t.Errorf("LockName(%.40q…) = %q, want the unchanged %q so existing rows keep working", key, got, want)
		}
	}
	if got := gocronflag.LockName(strings.Repeat("é", 200)); !strings.HasPrefix(got, gocronflag.LockPrefix+"éé") {
		t.Errorf("a long key's row %q does not start with a readable part of the key", got)
	}
	rows, _, err := s.Flags(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(keys) {
		t.Errorf("%d rows for %d keys", len(rows), len(keys))
	}
}
