//go:build linux

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Where run can create a cgroup v2 below its own (as root, or in a
// delegated subtree), each watchdog starts its command in a cgroup of its
// own (CLONE_INTO_CGROUP) and kills the tree by writing to its
// cgroup.kill (Linux 5.14): the kernel sends SIGKILL to every process of
// the cgroup at once, whatever its parent, process group, session or
// state, including processes forked during the kill. Only a process that
// may write to the cgroup hierarchy can move itself out. But it signals
// each process through its main thread, and a process whose main thread
// has exited (SYS_exit, pthread_exit) while other threads run ignores
// that signal (seen on Linux 6.18): the sweeps of /proc follow each
// cgroup.kill (killDescendants), for those.

// cgroupParent returns the cgroup v2 directory this process runs in,
// after checking that it can create a cgroup with cgroup.kill below it,
// or says why not.
func cgroupParent() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	own := ""
	for line := range strings.SplitSeq(string(data), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			own = path
		}
	}
	dir, err := cgroupDir(own)
	if err != nil {
		return "", err
	}
	probe, err := os.MkdirTemp(dir, "leadership-probe-")
	if err != nil {
		return "", fmt.Errorf("cannot create a cgroup below %s: %w", dir, err)
	}
	defer os.Remove(probe)
	if _, err := os.Stat(filepath.Join(probe, "cgroup.kill")); err != nil {
		return "", errors.New("cgroup v2 without cgroup.kill (Linux before 5.14)")
	}
	return dir, nil
}

// cgroupDir finds the directory of the cgroup v2 own (as /proc/self/cgroup
// names it) where the hierarchy is mounted: /sys/fs/cgroup, or
// /sys/fs/cgroup/unified on hybrid systems.
func cgroupDir(own string) (string, error) {
	if own == "" {
		return "", errors.New("no cgroup v2 in /proc/self/cgroup")
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE ...
		f := strings.Fields(line)
		_, fstype, _ := strings.Cut(line, " - ")
		if len(f) < 5 || !strings.HasPrefix(fstype, "cgroup2 ") {
			continue
		}
		root, mount := f[3], f[4] // a container without a cgroup namespace may mount a subtree
		if rest, ok := strings.CutPrefix(own, strings.TrimSuffix(root, "/")); ok && (rest == "" || rest[0] == '/') {
			return filepath.Join(mount, rest), nil
		}
	}
	return "", errors.New("no cgroup v2 mounted (/proc/self/mountinfo)")
}

// cgroupOf is the cgroup, below parent, of the command of the watchdog
// process watchdog.
func cgroupOf(parent string, watchdog int) string {
	return filepath.Join(parent, "leadership-"+strconv.Itoa(watchdog))
}

// killCgroup sends SIGKILL to every process of the cgroup dir and reports
// whether any task of it still runs (a killed one until it has exited;
// zombies do not count). A cgroup that does not exist holds nothing: the
// watchdog removes its own once it is empty.
func killCgroup(dir string) (populated bool) {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return !errors.Is(err, fs.ErrNotExist) // cannot tell: the caller tries again
	}
	events, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	return err != nil || strings.Contains(string(events), "populated 1")
}

// cgroupFD creates the cgroup dir and opens it for CLONE_INTO_CGROUP. An
// empty one left by a watchdog killed with its run is replaced.
func cgroupFD(dir string) (int, error) {
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrExist) && os.Remove(dir) == nil {
		err = os.Mkdir(dir, 0o755)
	}
	if err != nil {
		return -1, fmt.Errorf("cgroup for the command: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("cgroup for the command: %w", err)
	}
	return fd, nil
}
