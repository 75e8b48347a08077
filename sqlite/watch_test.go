package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

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
