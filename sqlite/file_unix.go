//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// prepareFile creates the database file at path, readable and writable by
// its owner only (0600, whatever the umask; SQLite gives the -wal and -shm
// files the database file's mode), unless it exists, and checks that this
// user may read and write it and create files beside it. In a directory
// every user may write (/tmp, or the current directory with the default
// path), it never follows a symbolic link, and refuses a path, or a -wal
// or -shm file, that is a symbolic link or belongs to another user: anyone
// could have planted it there.
func prepareFile(path string) error {
	dir := filepath.Dir(path)
	dirInfo, err := os.Stat(dir)
	if err != nil {
		return err
	}
	shared := dirInfo.Mode().Perm()&0o002 != 0
	flags := os.O_RDWR | os.O_CREATE // in a directory of one's own, links are the owner's choice
	if shared {
		flags |= os.O_EXCL | syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if shared && errors.Is(err, fs.ErrExist) {
		if err := checkPlanted(path); err != nil {
			return err
		}
		f, err = os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	}
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("this user (uid %d) may not read and write it (%s): every process sharing the file needs read and write "+
			"access to it and to its -wal and -shm files, and write access to its directory", os.Getuid(), describeFile(path))
	}
	if err != nil {
		return err
	}
	f.Close()
	if _, err := os.Lstat(path + "-wal"); errors.Is(err, fs.ErrNotExist) && unix.Access(dir, unix.W_OK|unix.X_OK) != nil {
		return fmt.Errorf("this user (uid %d) may not create files in %s (%s), as SQLite must for the -wal and -shm files: "+
			"every process sharing the file needs write access to its directory", os.Getuid(), dir, describeFile(dir))
	}
	return nil
}

// checkPlanted refuses path, or its -wal or -shm file, if it is a
// symbolic link or belongs to another user.
func checkPlanted(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a symbolic link in %s, a directory every user may write: anyone could have planted it; "+
				"keep the database in a directory only the users sharing it may write", p, filepath.Dir(path))
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
			return fmt.Errorf("%s belongs to another user (uid %d), in %s, a directory every user may write: anyone could have planted it; "+
				"keep the database in a directory only the users sharing it may write", p, st.Uid, filepath.Dir(path))
		}
	}
	return nil
}

// describeFile gives the mode and owner of path, for errors.
func describeFile(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return err.Error()
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("mode %04o, owner uid %d gid %d", fi.Mode().Perm(), st.Uid, st.Gid)
	}
	return fmt.Sprintf("mode %04o", fi.Mode().Perm())
}
