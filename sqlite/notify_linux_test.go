package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/sqlite"
)

// TestAReleaseSetsTheFileTimesOnceCommitted: a release (Close, and an
// eviction) sets the database file's times after its commit, which gives
// the watchers of other processes a file-change signal once the release
// is visible. The signal of its -wal write comes before the fsync and can
// precede the commit's visibility by longer than the watcher re-reads
// (seen in CI: a handover left to the 2 s poll, 1.59 s).
func TestAReleaseSetsTheFileTimesOnceCommitted(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flags.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	store := newStore(t, db)
	ctx := context.Background()
	past := time.Now().Add(-time.Hour)
	for _, release := range []struct {
		name string
		do   func(f *leadership.Flag) error
	}{
		{"close", func(f *leadership.Flag) error { return f.Close() }},
		{"evict", func(f *leadership.Flag) error { _, err := store.Evict(ctx, "evict"); return err }},
	} {
		f, err := leadership.NewFlag().Store(store).Name(release.name).Build(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if !f.Raised() {
			t.Fatalf("%s: the flag did not raise", release.name)
		}
		if err := os.Chtimes(path, past, past); err != nil {
			t.Fatal(err)
		}
		if err := release.do(f); err != nil {
			t.Fatalf("%s: %v", release.name, err)
		}
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.ModTime().Before(past.Add(time.Minute)) {
			t.Errorf("%s: the file's modification time is still %v after the release: no signal once it is visible", release.name, info.ModTime())
		}
	}
}
