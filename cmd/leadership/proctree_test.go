//go:build linux

package main

import (
	"errors"
	"fmt"
	"log/slog"
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
	if found >= 11 {
		t.Fatalf("the sweep found %d of the 11 processes of the tree: it did not stop at its deadline", found)
	}
	t.Logf("the sweep found %d of the 11 processes before its deadline", found)
	// Past its deadline, a sweep finds nothing and says another may.
	found = 0
	more, err = sweep(map[int]bool{os.Getpid(): true}, monoNow(), func(p proc, fd int) { closeFD(fd); found++ })
	if err != nil || found != 0 || !more {
		t.Fatalf("a sweep past its deadline: found %d, more = %v, err = %v; want 0, true, nil", found, more, err)
	}
}

// helperEnv has TestMain run, instead of the tests, runHelper(NAME, ARG)
// for its value NAME:ARG: a helper that signals every process below it
// needs a process of its own.
const helperEnv = "LEADERSHIP_TEST_HELPER"

// runHelper runs the helper name with arg and returns the exit code.
func runHelper(name, arg string) int {
	var err error
	switch name {
	case "kill-descendants":
		err = killDescendantsHelper(arg)
	case "watchdog-step":
		err = watchdogStepHelper()
	default:
		err = fmt.Errorf("no helper %q", name)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// helper runs the helper name with arg in a process of its own, failing t
// if it fails.
func helper(t *testing.T, name, arg string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+name+":"+arg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helper %s: %v\n%s", name, err, out)
	}
}

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
	helper(t, "kill-descendants", file)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	orphan, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	// On failure the orphan is left to end by itself (sleep 60): its pid
	// may be another process's by the time a cleanup could kill it.
	waitFor(t, 5*time.Second, "the orphan dies", func() bool {
		s := state(orphan)
		return s == "" || s == "Z" || s == "X"
	})
}

// killDescendantsHelper starts sh in a session of its own, which leaves an
// orphaned sleep in its process group and writes its pid to file, then
// kills every process below this one.
func killDescendantsHelper(file string) error {
	sh := exec.Command("sh", "-c", `(sleep 60 & echo $! > "$0.new"; mv "$0.new" "$0"); exec sleep 60`, file)
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := sh.Start(); err != nil {
		return err
	}
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if data, err := os.ReadFile(file); err == nil {
			orphan, _ := strconv.Atoi(strings.TrimSpace(string(data)))
			if p, err := readStat(orphan); err == nil && p.ppid != sh.Process.Pid && p.ppid != os.Getpid() {
				break // reparented out of the tree
			}
		}
		if time.Since(start) > 10*time.Second {
			_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
			return errors.New("the orphan was not reparented out of the tree within 10 s")
		}
	}
	killDescendants(0)
	_ = sh.Wait() // killed
	return nil
}

// TestAStepSleepsNoLaterThanTheSIGKILL: when the watchdog's own deadline
// stops the tree (run stopped or starved), the step that sends SIGTERM
// either begins the SIGKILL or sleeps until it is due, counting the time
// its SIGTERM sweep took. (It read the clock before the sweep, and so
// slept the sweep's time past the SIGKILL: up to the whole grace.)
func TestAStepSleepsNoLaterThanTheSIGKILL(t *testing.T) {
	t.Parallel()
	helper(t, "watchdog-step", "")
}

// watchdogStepHelper starts a tree of 300 processes that ignore SIGTERM,
// lets a watchdog's deadline pass with a grace of 20 ms, takes one step,
// and fails unless that step began the SIGKILL or sleeps until it is due.
// It kills the tree either way.
func watchdogStepHelper() error {
	sh := exec.Command("sh", "-c", `trap "" TERM; i=0; while [ $i -lt 300 ]; do sleep 60 & i=$((i+1)); done; wait`)
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sh.Start(); err != nil {
		return err
	}
	defer func() {
		for killDescendants(0) > 0 {
			reapChildren(nil)
		}
		_ = sh.Wait()
	}()
	children := "/proc/" + strconv.Itoa(sh.Process.Pid) + "/task/" + strconv.Itoa(sh.Process.Pid) + "/children"
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if data, _ := os.ReadFile(children); len(strings.Fields(string(data))) == 300 {
			break
		}
		if time.Since(start) > 20*time.Second {
			return errors.New("sh did not start 300 sleeps within 20 s")
		}
	}
	w := &watchdog{grace: int64(20 * time.Millisecond), margin: int64(100 * time.Millisecond), log: slog.New(slog.DiscardHandler),
		started: true, cmd: sh.Process.Pid, deadline: monoNow()}
	ts := w.step()
	end := monoNow()
	if !w.stopping {
		return errors.New("a step past the deadline did not stop the tree")
	}
	if late := time.Duration(end + ts.Nano() - w.killAt); !w.killing && late > time.Millisecond {
		return fmt.Errorf("after a step past the deadline (grace 20 ms), the watchdog sleeps until %v after the SIGKILL is due", late)
	}
	return nil
}
