package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/sqlite"
)

// TestAReleaseWakesAFollowerOnAnotherDatabaseHandleBeforeItsPoll builds two
// flags at the default settings, each on its own *sql.DB over one file as
// two processes would, and checks that the follower takes over within a
// fraction of its 2 s poll interval after the leader's Close: the
// release reached it through the file watcher, not its poll.
func TestAReleaseWakesAFollowerOnAnotherDatabaseHandleBeforeItsPoll(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flags.db")
	build := func() *leadership.Flag {
		t.Helper()
		db, err := sqlite.Open(path)
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		t.Cleanup(func() { db.Close() })
		f, err := leadership.NewFlag().Store(newStore(t, db)).Name("handover").Build(context.Background())
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	leader := build()
	if !leader.Raised() {
		t.Fatal("the first flag did not raise")
	}
	follower := build()
	if follower.Raised() {
		t.Fatal("the second flag raised while the first leads")
	}
	// Let the follower settle into its wait for the next poll (2 s).
	time.Sleep(300 * time.Millisecond)
	closed := time.Now()
	if err := leader.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := follower.Wait(ctx); err != nil {
		t.Fatalf("the follower did not take over: %v", err)
	}
	took := time.Since(closed)
	t.Logf("handover took %v", took)
	if took > 600*time.Millisecond {
		t.Errorf("handover took %v; the watcher should have woken the follower well before its 2 s poll", took)
	}
}

// TestTheWatcherStopsWithTheLastFlagAndStartsAgain runs two handovers one
// after the other on the same two stores, each time closing every flag,
// and checks that the watchers start again for new flags and leave no
// goroutine behind once the flags and the databases are closed. It is
// not parallel, so no other test's goroutines run meanwhile.
func TestTheWatcherStopsWithTheLastFlagAndStartsAgain(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	path := filepath.Join(t.TempDir(), "flags.db")
	var stores []*sqlite.Store
	for range 2 {
		db, err := sqlite.Open(path)
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		defer db.Close()
		stores = append(stores, newStore(t, db))
	}
	for round := range 2 {
		build := func(s *sqlite.Store) *leadership.Flag {
			f, err := leadership.NewFlag().Store(s).Name("restart").Build(context.Background())
			if err != nil {
				t.Fatalf("round %d: Build: %v", round, err)
			}
			return f
		}
		leader := build(stores[round%2])
		follower := build(stores[(round+1)%2])
		time.Sleep(100 * time.Millisecond)
		closed := time.Now()
		if err := leader.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := follower.Wait(ctx)
		cancel()
		took := time.Since(closed)
		follower.Close()
		if err != nil {
			t.Fatalf("round %d: the follower did not take over: %v", round, err)
		}
		if took > 600*time.Millisecond {
			t.Errorf("round %d: handover took %v; the watcher should have woken the follower well before its 2 s poll", round, took)
		}
	}
}
