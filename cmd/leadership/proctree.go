package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The process tree of a command is everything it starts, directly or not.
// `leadership run` and its watchdog are child subreapers
// (PR_SET_CHILD_SUBREAPER): a process of the tree whose parent exits is
// reparented to the nearest of them instead of to init, so every process
// of the tree stays a descendant of the watchdog (or of run, if the
// watchdog is gone) until it is reaped, and a scan of /proc finds it even
// if it left the command's process group or session.

// becomeSubreaper makes this process a child subreaper.
func becomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", err)
	}
	return nil
}

// monoNow reads CLOCK_MONOTONIC, the clock Go's monotonic readings come
// from on Linux. It is one clock for every process of the machine (in one
// time namespace), so an instant read in one process means the same in
// another.
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for this clock
	return ts.Nano()
}

// monoOf converts t, which must carry a monotonic reading, to CLOCK_MONOTONIC
// nanoseconds, never later than t. Go's monotonic readings are
// CLOCK_MONOTONIC less a constant of the process, which monoCalibration
// measures once.
func monoOf(t time.Time) int64 {
	ref, offset := monoCalibration()
	return offset + int64(t.Sub(ref))
}

// monoCalibration returns an instant and CLOCK_MONOTONIC at that instant,
// never later than the truth: of a few clock reads on either side of
// time.Now, it keeps the pair read closest together, and the read before.
var monoCalibration = sync.OnceValues(func() (time.Time, int64) {
	ref := time.Now()
	offset, spread := int64(0), int64(math.MaxInt64)
	for range 8 {
		before := monoNow()
		now := time.Now()
		after := monoNow()
		if after-before < spread {
			spread, offset = after-before, before-int64(now.Sub(ref))
		}
	}
	return ref, offset
})

// proc is one process below this one.
type proc struct {
	pid, ppid, pgrp int
	zombie          bool
}

// readStat reads pid's state, parent and process group from /proc.
func readStat(pid int) (proc, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')') // the command name may hold anything
	if i < 0 {
		return proc{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(s[i+1:]) // state ppid pgrp ...
	if len(f) < 3 {
		return proc{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return proc{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	return proc{pid: pid, ppid: ppid, pgrp: pgrp, zombie: f[0] == "Z" || f[0] == "X"}, nil
}

// descendants lists the processes below this one. A process that forks
// while the scan runs may be missed; callers that must catch every one
// signal, then scan again until none is left.
func descendants() ([]proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[int][]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := readStat(pid)
		if err != nil {
			continue // exited meanwhile
		}
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []proc
	queue := []int{os.Getpid()}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out, nil
}

// signalDescendants sends sig to every running process below this one,
// except skip (0 for none; its own descendants are signalled) and except
// the members of process group skipGroup (0 for none), which the caller
// signals as a group. It returns how many running processes it found
// besides skip.
func signalDescendants(sig syscall.Signal, skip, skipGroup int) int {
	procs, err := descendants()
	if err != nil {
		return 1 // cannot tell: the caller tries again
	}
	tree := map[int]bool{os.Getpid(): true}
	for _, p := range procs {
		tree[p.pid] = true
	}
	running := 0
	for _, p := range procs {
		if p.zombie {
			continue
		}
		if p.pid == skip {
			continue
		}
		running++
		if skipGroup != 0 && p.pgrp == skipGroup {
			continue
		}
		signalIfOurs(p.pid, sig, tree)
	}
	return running
}

// signalIfOurs sends sig to pid if it is still a process of tree. A pid
// that exited after the scan may be reused by an unrelated process, so the
// process is pinned with a pidfd first and its parent checked again; a
// signal through the pidfd can only reach the pinned process.
func signalIfOurs(pid int, sig syscall.Signal, tree map[int]bool) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ENOSYS) { // Linux before 5.3: a plain kill
		_ = syscall.Kill(pid, sig)
		return
	}
	if err != nil {
		return // exited
	}
	defer unix.Close(fd)
	if p, err := readStat(pid); err != nil || !tree[p.ppid] {
		return
	}
	_ = unix.PidfdSendSignal(fd, sig, nil, 0)
}

// reapChildren collects every child that has exited, without blocking,
// calling exited for each. It reports whether no child is left at all.
func reapChildren(exited func(pid int, ws syscall.WaitStatus)) (none bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.ECHILD):
			return true
		case err != nil || pid <= 0:
			return false
		}
		if exited != nil {
			exited(pid, ws)
		}
	}
}

// statusOf is the status a shell would report for ws: the exit code, or
// 128+N when signal N ended the process.
func statusOf(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
