//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheDefaultFileIsPrivate: with no DSN, the command creates
// leadership.db in the current directory for its user alone (0600, and so
// its -wal and -shm files); in a directory every user may write, it
// refuses a leadership.db that is a symbolic link someone planted, and
// leaves the link's target alone.
func TestTheDefaultFileIsPrivate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, _, errs := cliIn(t, dir, "", "run", "--name", "n", "--", "sh", "-c", `stat -c '%a %n' leadership.db* > modes`); code != 0 {
		t.Fatalf("run = %d: %s", code, errs)
	}
	modes, err := os.ReadFile(filepath.Join(dir, "modes"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"600 leadership.db\n", "600 leadership.db-shm\n", "600 leadership.db-wal\n"} {
		if !strings.Contains(string(modes), want) {
			t.Errorf("while the command ran: %q, want %q", modes, want)
		}
	}

	shared := t.TempDir()
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.Symlink(victim, filepath.Join(shared, "leadership.db")); err != nil {
		t.Fatal(err)
	}
	code, _, errs := cliIn(t, shared, "", "status")
	if code != exitUnavailable || !strings.Contains(errs, "leadership.db is a symbolic link in ., a directory every user may write") {
		t.Errorf("status beside a planted link = %d: %s", code, errs)
	}
	if _, err := os.Lstat(victim); err == nil {
		t.Errorf("the link's target was created")
	}
}
