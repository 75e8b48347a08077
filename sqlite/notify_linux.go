package sqlite

import (
	"bytes"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fileChanges reports writes to the database file name in dir and to its
// -wal file, and changes of their times (announceRelease): the channel
// receives a value (values are dropped while one is pending) after each,
// and after an overflow of the kernel's queue, which may have dropped
// some. stop ends the reports and closes the channel.
func fileChanges(dir, name string) (<-chan struct{}, func(), error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, nil, err
	}
	// The directory, not the files: the -wal file is created and deleted
	// as connections come and go.
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MODIFY|unix.IN_ATTRIB|unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: Close ends a pending Read
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			if matches(buf[:n], name) {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return ch, func() { f.Close(); <-done }, nil
}

// matches reports whether the inotify events in buf name the database
// file or its -wal file, or report a queue overflow.
func matches(buf []byte, name string) bool {
	for len(buf) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(buf) {
			return true // a torn read: look anyway
		}
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			return true
		}
		n := buf[unix.SizeofInotifyEvent:end]
		if i := bytes.IndexByte(n, 0); i >= 0 {
			n = n[:i]
		}
		if s := string(n); s == name || s == name+"-wal" {
			return true
		}
		buf = buf[end:]
	}
	return false
}

// announceRelease sets the times of the database file at path to now,
// after a release has committed: the watchers of other processes get a
// file-change signal (IN_ATTRIB) once the commit is visible, however long
// its sync took after the -wal write that signalled it first.
func announceRelease(path string) {
	if path != "" {
		_ = unix.UtimesNanoAt(unix.AT_FDCWD, path, nil, unix.AT_SYMLINK_NOFOLLOW)
	}
}
