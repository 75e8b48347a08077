package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// TestAReleaseSetsNoTimesThroughALink: once the database file's path has
// become a symbolic link (planted after the store opened the file), a
// release's signal sets the times of the link, never of its target.
func TestAReleaseSetsNoTimesThroughALink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "flags.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	f, err := leadership.NewFlag().Store(newStore(t, db)).Name("linked").Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if !f.Raised() {
		t.Fatal("the flag did not raise")
	}
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(target, past, past); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	old := unix.NsecToTimespec(past.UnixNano())
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{old, old}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	if !info.ModTime().Equal(past) {
		t.Errorf("the link's target's modification time is %v, not %v: the release's signal followed the link", info.ModTime(), past)
	}
	link, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if link.ModTime().Before(past.Add(time.Minute)) {
		t.Errorf("the link's modification time is still %v: the release set no times, so this test shows nothing", link.ModTime())
	}
}
