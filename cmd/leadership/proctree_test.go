//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBothSweepsFindTheTree: a sweep through the children files and a
// sweep of all of /proc (for kernels without those files) both find a
// child of this process and its grandchild, with their parents.
func TestBothSweepsFindTheTree(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	sh := cmd.Process.Pid
	var sleep int
	waitFor(t, 10*time.Second, "sh starts sleep", func() bool {
		data, _ := os.ReadFile("/proc/" + strconv.Itoa(sh) + "/task/" + strconv.Itoa(sh) + "/children")
		sleep, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		return sleep != 0
	})
	for name, sweep := range map[string]func(*sweeper) error{
		"children files": func(s *sweeper) error { s.walk(); return nil },
		"all of /proc":   (*sweeper).all,
	} {
		parents := map[int]int{}
		s := &sweeper{tree: map[int]bool{os.Getpid(): true}, found: func(p proc, fd int) {
			parents[p.pid] = p.ppid
			closeFD(fd)
		}}
		for s.more = true; s.more; {
			s.more = false
			if err := sweep(s); err != nil {
				t.Fatal(err)
			}
		}
		if parents[sh] != os.Getpid() || parents[sleep] != sh {
			t.Errorf("%s: found %v, want sh %d (parent %d) and sleep %d (parent sh)", name, parents, sh, os.Getpid(), sleep)
		}
	}
}

// TestASweepEndsAtItsDeadline: a sweep given a deadline stops there, even
// with processes left to visit, and says another sweep may find more; so
// the sweep that delivers SIGTERM cannot delay the SIGKILL, however long
// it would take (following a fork relay from each process to its child, it
// took 9.8 s in CI, until the relays gave up by themselves).
func TestASweepEndsAtItsDeadline(t *testing.T) {
	cmd := exec.Command("sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 30 & done; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	children := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/" + strconv.Itoa(cmd.Process.Pid) + "/children"
	waitFor(t, 10*time.Second, "sh starts ten sleeps", func() bool {
		data, _ := os.ReadFile(children)
		return len(strings.Fields(string(data))) == 10
	})
	// Each process found takes 50 ms, so the whole tree would take 550 ms;
	// the deadline is 120 ms away.
	found := 0
	more, err := sweep(map[int]bool{os.Getpid(): true}, monoNow()+int64(120*time.Millisecond), func(p proc, fd int) {
		closeFD(fd)
		if p.pgrp == cmd.Process.Pid {
			found++
			time.Sleep(50 * time.Millisecond)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if found >= 11 || !more {
		t.Fatalf("the sweep found %d of the 11 processes of the tree, more = %v: it did not stop at its deadline", found, more)
	}
	t.Logf("the sweep found %d of the 11 processes before its deadline", found)
}

// killHelperEnv names the file where killDescendantsHelper, run by
// TestMain in a process of its own, writes the pid of the orphan.
const killHelperEnv = "LEADERSHIP_TEST_KILL_DESCENDANTS"

// TestKillDescendantsKillsTheGroupsOfSessionsTheTreeMade: a process of the
// tree in a session of its own (setsid) is killed with its whole process
// group, including a member no sweep can find (reparented out of the
// tree: its parent exited, and the helper is no subreaper). The kernel's
// kill of a group also reaches a child forked during the kill, which a
// sweep may never reach: a fork relay in a session of its own dies at the
// first sight of any of its processes. The helper runs in a process of its
// own, since killDescendants kills every process below the caller.
func TestKillDescendantsKillsTheGroupsOfSessionsTheTreeMade(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "orphan")
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), killHelperEnv+"="+file)
	if out, err := helper.CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	orphan, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	t.Cleanup(func() {
		if p, err := readStat(orphan); err == nil && p.alive {
			_ = syscall.Kill(orphan, syscall.SIGKILL)
		}
	})
	waitFor(t, 5*time.Second, "the orphan dies", func() bool {
		s := state(orphan)
		return s == "" || s == "Z" || s == "X"
	})
}

// killDescendantsHelper starts sh in a session of its own, which leaves an
// orphaned sleep in its process group and writes its pid to file, then
// kills every process below this one. It returns the exit code.
func killDescendantsHelper(file string) int {
	sh := exec.Command("sh", "-c", `(sleep 60 & echo $! > "$0.new"; mv "$0.new" "$0"); exec sleep 60`, file)
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := sh.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if data, err := os.ReadFile(file); err == nil {
			orphan, _ := strconv.Atoi(strings.TrimSpace(string(data)))
			if p, err := readStat(orphan); err == nil && p.ppid != sh.Process.Pid && p.ppid != os.Getpid() {
				break // reparented out of the tree
			}
		}
		if time.Since(start) > 10*time.Second {
			fmt.Fprintln(os.Stderr, "the orphan was not reparented out of the tree within 10 s")
			_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
			return 1
		}
	}
	killDescendants(0)
	_ = sh.Wait()
	return 0
}
