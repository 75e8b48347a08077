//go:build unix

package sqlite_test

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/sqlite"
)

// openAndWrite opens path with sqlite.Open and writes a flag, which
// creates the -wal and -shm files, and checks that the three files have
// the permissions want while the database is open.
func openAndWrite(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, leadership.Request{Name: "f", Holder: "h", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	checkModes(t, path, want)
}

// checkModes checks that the database file and its -wal and -shm files
// have the permissions want.
func checkModes(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %04o, want %04o", filepath.Base(p), fi.Mode().Perm(), want)
		}
	}
}

// TestANewFileIsTheOwnersOnly: Open creates the database file, and SQLite
// its -wal and -shm files, readable and writable by the owner only,
// whatever the umask: any user who can open them can take SQLite's locks
// and stop the leader's renewals.
func TestANewFileIsTheOwnersOnly(t *testing.T) { // not parallel: the umask is the process's
	for _, umask := range []int{0o022, 0} {
		old := syscall.Umask(umask)
		path := filepath.Join(t.TempDir(), "leadership.db")
		openAndWrite(t, path, 0o600)
		syscall.Umask(old)
	}
}

// TestAnExistingFileKeepsItsMode: a file created beforehand for users who
// share it keeps its mode, and SQLite gives it to the -wal and -shm files.
func TestAnExistingFileKeepsItsMode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leadership.db")
	if err := os.WriteFile(path, nil, 0o660); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o660); err != nil { // past the umask
		t.Fatal(err)
	}
	openAndWrite(t, path, 0o660)
}

// TestOpenRefusesWhatAnotherUserMayHavePlanted: in a directory every user
// may write (as /tmp), Open refuses a database path, or a -wal or -shm
// file, that is a symbolic link, and leaves the link's target alone; in a
// directory of one's own, a link is followed as before.
func TestOpenRefusesWhatAnotherUserMayHavePlanted(t *testing.T) {
	t.Parallel()
	for _, planted := range []string{"", "-wal", "-shm"} {
		shared := t.TempDir()
		if err := os.Chmod(shared, 0o1777); err != nil {
			t.Fatal(err)
		}
		victim := filepath.Join(t.TempDir(), "victim")
		path := filepath.Join(shared, "leadership.db")
		if planted != "" {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(victim, path+planted); err != nil {
			t.Fatal(err)
		}
		db, err := sqlite.Open(path)
		if err == nil {
			db.Close()
			t.Fatalf("Open with a symbolic link at %s in a world-writable directory succeeded", filepath.Base(path+planted))
		}
		if !strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), "every user may write") {
			t.Errorf("Open = %v, want an error naming the symbolic link and the directory", err)
		}
		if _, err := os.Lstat(victim); err == nil {
			t.Errorf("the link's target %s was created", victim)
		}
	}
	// In a directory of one's own, a symbolic link is the owner's choice.
	own := t.TempDir()
	target := filepath.Join(own, "real.db")
	if err := os.Symlink(target, filepath.Join(own, "leadership.db")); err != nil {
		t.Fatal(err)
	}
	db, err := sqlite.Open(filepath.Join(own, "leadership.db"))
	if err != nil {
		t.Fatalf("Open through a link in a private directory: %v", err)
	}
	db.Close()
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("Open through a link in a private directory: its target is %v, %v; want a file of mode 0600", fi, err)
	}
}

// TestOpenRefusesAnotherUsersFileInASharedDirectory: a database file that
// another user created in a world-writable directory is refused (root
// only: it needs chown).
func TestOpenRefusesAnotherUsersFileInASharedDirectory(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to give the file to another user")
	}
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(shared, "leadership.db")
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	db, err := sqlite.Open(path)
	if err == nil {
		db.Close()
		t.Fatal("Open of another user's file in a world-writable directory succeeded")
	}
	if !strings.Contains(err.Error(), "another user (uid 65534)") {
		t.Errorf("Open = %v, want an error naming the other user", err)
	}
}

// TestSQLiteRefusesWalAndShmLinksPlantedAfterOpen: Open checks the -wal
// and -shm paths, but SQLite creates and opens the files later (and again
// whenever the last connection to the database has closed, which deletes
// them), so a link planted in between is not Open's to refuse. SQLite
// opens both with O_NOFOLLOW: a write then fails, and the links' targets
// are neither created nor written. This pins that behaviour of the
// driver, on which docs/operations.md ("The SQLite file") relies.
func TestSQLiteRefusesWalAndShmLinksPlantedAfterOpen(t *testing.T) {
	t.Parallel()
	for _, planted := range []string{"-wal", "-shm"} {
		shared := t.TempDir()
		if err := os.Chmod(shared, 0o1777); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(shared, "leadership.db")
		db, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		s, err := sqlite.New(db)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		db.Close() // the last connection: SQLite deletes the -wal and -shm files
		for _, p := range []string{path + "-wal", path + "-shm"} {
			if _, err := os.Lstat(p); err == nil {
				t.Fatalf("%s is still there after the last connection closed", filepath.Base(p))
			}
		}
		victim := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(victim, []byte("kept"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, path+planted); err != nil {
			t.Fatal(err)
		}
		// As Open would after a check that came before the link.
		raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		_, err = sqlite.New(raw)
		if err == nil {
			_, err = raw.Exec(`INSERT INTO leadership_flags (name, renewed_at, expires_at) VALUES ('f', 0, 0)`)
		}
		raw.Close()
		if err == nil {
			t.Errorf("a write through a %s link planted after Open's check succeeded", planted)
		}
		t.Logf("with a %s link: %v", planted, err)
		if b, err := os.ReadFile(victim); err != nil || string(b) != "kept" {
			t.Errorf("the %s link's target now holds %q, %v", planted, b, err)
		}
	}
}
