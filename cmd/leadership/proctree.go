//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The process tree of a command is everything it starts, directly or not.
// `leadership run` and its watchdog are child subreapers
// (PR_SET_CHILD_SUBREAPER): a process of the tree whose parent exits is
// reparented to the nearest of them instead of to init, so every process
// of the tree stays a descendant of the watchdog (or of run, if the
// watchdog is gone) until it is reaped, and a scan of /proc finds it even
// if it left the command's process group or session. Where run can create
// a cgroup, the tree is killed through it instead (cgroup.go); the scan
// still delivers SIGTERM.

// becomeSubreaper makes this process a child subreaper.
func becomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", err)
	}
	return nil
}

// checkProcNamespace refuses a /proc that shows another PID namespace than
// this process's (unshare --pid without a new /proc): the scan would walk
// another namespace's processes from a pid that means something else
// there.
func checkProcNamespace() error {
	self, err := os.Readlink("/proc/self")
	if err == nil && self == strconv.Itoa(os.Getpid()) {
		return nil
	}
	if err != nil {
		self = err.Error()
	}
	return fmt.Errorf("/proc belongs to another PID namespace (/proc/self is %s, this process is %d): "+
		"mount a /proc for this namespace (unshare --pid --fork --mount-proc, or mount -t proc proc /proc in its mount namespace)", self, os.Getpid())
}

// proc is one process below this one.
type proc struct {
	pid, ppid, pgrp, sid int
	alive                bool // some thread has not exited: not a zombie, or a zombie leader whose other threads run
}

// readStat reads pid's parent, process group, session and state from
// /proc.
func readStat(pid int) (proc, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	data, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return proc{}, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')') // the command name may hold anything
	f := strings.Fields(s[i+1:])       // state ppid pgrp session ...
	if i < 0 || len(f) < 4 {
		return proc{}, fmt.Errorf("%s/stat: malformed", dir)
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	sid, err3 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || err3 != nil {
		return proc{}, fmt.Errorf("%s/stat: malformed", dir)
	}
	p := proc{pid: pid, ppid: ppid, pgrp: pgrp, sid: sid, alive: f[0] != "Z" && f[0] != "X"}
	if f[0] == "Z" {
		// A main thread that called SYS_exit or pthread_exit leaves the
		// process a zombie in stat while its other threads run: it is
		// alive while status counts more threads than the dead leader.
		status, _ := os.ReadFile(dir + "/status")
		_, threads, _ := strings.Cut(string(status), "\nThreads:")
		n, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(threads, "\n", 2)[0]))
		p.alive = n > 1
	}
	return p, nil
}

// sweep finds, once, each process whose parent is in tree and which is
// not, and calls found for it after adding it to tree, so its children
// are found in the same sweep. It reports whether another sweep may find
// more: it found some, or a child it listed was gone before it could be
// pinned (a fork relay moves on). Each process is pinned with a pidfd and
// its parent checked again before found gets it, so a pid reused after
// the read is never signalled: fd is the pidfd, which found must close
// (-1 before Linux 5.3, where signals go by pid).
//
// It reads the children of each process of tree, and of each it finds,
// from /proc/PID/task/TID/children: a child is signalled microseconds
// after it was listed, which gives a fork relay (a process that forks the
// next and exits at once, whose orphans the subreaper inherits) little
// room. Without those files (a kernel built without CONFIG_PROC_CHILDREN)
// it reads every process of /proc, in pid order.
//
// A sweep with a deadline (until, CLOCK_MONOTONIC nanoseconds; 0 for
// none) stops there, reporting more: a sweep that follows a fork relay
// from each process to its child can go on for as long as the relay runs.
func sweep(tree map[int]bool, until int64, found func(p proc, fd int)) (more bool, err error) {
	s := &sweeper{tree: tree, until: until, found: found}
	if childrenFiles() {
		s.walk()
	} else {
		err = s.all()
	}
	return s.more, err
}

// sweeper is one sweep.
type sweeper struct {
	tree  map[int]bool
	until int64
	found func(p proc, fd int)
	more  bool
}

// expired reports whether the sweep's deadline has passed.
func (s *sweeper) expired() bool {
	if s.until != 0 && monoNow() >= s.until {
		s.more = true
		return true
	}
	return false
}

// visit pins and hands over pid if its parent is in the tree; listed says
// a children file named it.
func (s *sweeper) visit(pid int, listed bool) bool {
	if s.tree[pid] || s.expired() {
		return false
	}
	s.more = s.more || listed
	if p, err := readStat(pid); err != nil || !s.tree[p.ppid] {
		return false
	}
	s.more = true
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		fd = -1
	} else if err != nil {
		return false // exited
	}
	p, err := readStat(pid)
	if err != nil || !s.tree[p.ppid] {
		closeFD(fd)
		return false
	}
	s.tree[pid] = true
	s.found(p, fd)
	return true
}

// walk visits the children of every process of the tree, and of every
// process it adds.
func (s *sweeper) walk() {
	queue := make([]int, 0, len(s.tree))
	for pid := range s.tree {
		queue = append(queue, pid)
	}
	for len(queue) > 0 && !s.expired() {
		dir := "/proc/" + strconv.Itoa(queue[0]) + "/task/"
		queue = queue[1:]
		tasks, _ := os.ReadDir(dir) // none once the process is gone
		for _, task := range tasks {
			data, _ := os.ReadFile(dir + task.Name() + "/children")
			for f := range strings.FieldsSeq(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && s.visit(pid, true) {
					queue = append(queue, pid)
				}
			}
		}
	}
}

// childrenFiles reports whether the kernel has /proc/PID/task/TID/children
// (CONFIG_PROC_CHILDREN).
var childrenFiles = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/thread-self/children")
	return err == nil
})

// all visits every process of /proc, in pid order, reading the list as it
// goes: a child listed before its parent is found by the next sweep.
func (s *sweeper) all() error {
	dir, err := os.Open("/proc")
	if err != nil {
		return err
	}
	defer dir.Close()
	for {
		names, err := dir.Readdirnames(64)
		for _, name := range names {
			if pid, err := strconv.Atoi(name); err == nil {
				s.visit(pid, false)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// send sends sig to the process pinned by fd (by pid if fd is -1).
func send(fd, pid int, sig syscall.Signal) {
	if fd < 0 {
		_ = syscall.Kill(pid, sig)
		return
	}
	_ = unix.PidfdSendSignal(fd, sig, nil, 0)
}

func closeFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// signalDescendants sends each of sigs, in order, to every process below
// this one except the members of process group skipGroup (0 for none),
// which the caller signals as a group, in one sweep of /proc that ends by
// until (see sweep): a process listed before its parent, forked after the
// sweep passed, or not reached by until, is missed. (Sweeping until
// nothing new appears would never end while a fork relay runs; so might
// one sweep that follows the relay, hence until.)
func signalDescendants(skipGroup int, until int64, sigs ...syscall.Signal) {
	_, _ = sweep(map[int]bool{os.Getpid(): true}, until, func(p proc, fd int) {
		if skipGroup == 0 || p.pgrp != skipGroup {
			for _, sig := range sigs {
				send(fd, p.pid, sig)
			}
		}
		closeFD(fd)
	})
}

// killDescendants kills every process below this one except skip (0 for
// none; its descendants are killed). It stops each process with SIGSTOP as
// a sweep finds it, so that the process can no longer fork, exit or be
// reaped, sweeps again until a sweep finds no process it has not stopped
// (and missed none), then sends SIGKILL to all of them. It returns how
// many were alive (zombies whose threads have all exited do not count, a
// zombie leader with live threads does); callers repeat it until none is.
//
// A process found in a session other than this one's is killed at once
// with its whole process group (kill(-pgrp), which also reaches a child
// forked meanwhile): such a session was made by a process of the tree
// (setsid), and sessions gain members only by fork, so its groups hold
// processes of the tree only. So a fork relay that keeps its group dies
// at the first sight of any of its processes. As PID 1 of its namespace
// this process adopts every orphan there, not only the tree's, and kills
// no group. The residuals are in docs/cli.md ("Sweeps of /proc").
func killDescendants(skip int) (alive int) {
	type pinned struct{ pid, fd int }
	var stopped []pinned
	session, _ := unix.Getsid(0)
	groups := os.Getpid() != 1
	tree := map[int]bool{os.Getpid(): true}
	for more := true; more; {
		var err error
		more, err = sweep(tree, 0, func(p proc, fd int) {
			if p.pid == skip {
				closeFD(fd)
				return
			}
			if groups && p.sid != session && p.pgrp > 1 {
				_ = syscall.Kill(-p.pgrp, syscall.SIGKILL)
			}
			send(fd, p.pid, syscall.SIGSTOP)
			stopped = append(stopped, pinned{p.pid, fd})
			if p.alive {
				alive++
			}
		})
		if err != nil {
			alive++ // cannot tell: the caller tries again
			break
		}
	}
	for _, s := range stopped {
		send(s.fd, s.pid, syscall.SIGKILL)
		closeFD(s.fd)
	}
	return alive
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
