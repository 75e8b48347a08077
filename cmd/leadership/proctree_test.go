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
	case "watchdog-late-kill":
		err = watchdogLateKillHelper()
	case "pid1-kill-descendants":
		err = pid1KillDescendantsHelper(arg)
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

// TestAsPID1KillDescendantsKillsNoGroup: as PID 1 of its namespace (a
// container's entrypoint), the caller adopts every orphan of the
// namespace, so a session made by a process from outside (docker exec,
// nsenter) can have a member that is the caller's child and members that
// are not below it: killDescendants kills the child only, not its group.
// The helper is PID 1 of new user, PID and mount namespaces; the session
// comes through nsenter, and the namespace's end kills what is left.
func TestAsPID1KillDescendantsKillsNoGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pid1 := exec.Command(os.Args[0], "-test.run=^$")
	pid1.Env = append(os.Environ(), helperEnv+"=pid1-kill-descendants:"+dir)
	pid1.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	var out strings.Builder
	pid1.Stdout, pid1.Stderr = &out, &out
	if err := pid1.Start(); err != nil {
		t.Skipf("cannot make user, PID and mount namespaces here: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- pid1.Wait() }()
	select {
	case err := <-done:
		if strings.Contains(out.String(), "mount /proc") {
			t.Skipf("cannot mount a /proc for the namespace here: %s", out.String())
		}
		t.Fatalf("the helper ended before it was ready: %v\n%s", err, out.String())
	case <-waitFile(filepath.Join(dir, "ready")):
		if _, err := os.Stat(filepath.Join(dir, "ready")); err != nil {
			_ = pid1.Process.Kill()
			t.Fatalf("the helper was not ready within a minute\n%s", out.String())
		}
	}
	// A session of its own whose leader's parent is nsenter, outside the
	// namespace, and whose other member is orphaned to the helper.
	session := exec.Command("nsenter", "--target", strconv.Itoa(pid1.Process.Pid), "--user", "--pid", "--mount",
		"setsid", "sh", "-c", `echo $$ > "$0/leader.new"; mv "$0/leader.new" "$0/leader"
(sleep 60 & echo $! > "$0/orphan.new"; mv "$0/orphan.new" "$0/orphan"); exec sleep 60`, dir)
	var sessionOut strings.Builder
	session.Stdout, session.Stderr = &sessionOut, &sessionOut
	if err := session.Start(); err != nil {
		_ = pid1.Process.Kill()
		t.Skipf("no nsenter here: %v", err)
	}
	var sessionErr error
	sessionDone := make(chan struct{})
	go func() { sessionErr = session.Wait(); close(sessionDone) }() // its sleep dies with the namespace
	t.Cleanup(func() { <-sessionDone })
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("helper: %v\n%s", err, out.String())
		}
	case <-sessionDone:
		// The session ends with the namespace, after the helper; before
		// it, nsenter could not enter the namespaces.
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, out.String())
			}
		case <-time.After(5 * time.Second):
			_ = pid1.Process.Kill()
			t.Skipf("nsenter could not start the session in the namespaces: %v\n%s", sessionErr, sessionOut.String())
		}
	case <-time.After(60 * time.Second):
		_ = pid1.Process.Kill()
		t.Fatalf("the helper did not end within 60 s\n%s", out.String())
	}
}

// waitFile returns a channel closed once file exists.
func waitFile(file string) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(file); err == nil {
				return
			}
		}
	}()
	return ch
}

// pid1KillDescendantsHelper, PID 1 of its namespaces, mounts the
// namespace's /proc, says it is ready, waits for the session of
// TestAsPID1KillDescendantsKillsNoGroup (its leader, and a member orphaned
// to this process), kills every process below this one, and fails unless
// the orphan is dead and the leader, not below this one, alive.
func pid1KillDescendantsHelper(dir string) error {
	if os.Getpid() != 1 {
		return fmt.Errorf("the helper is pid %d, not 1", os.Getpid())
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("mount /proc: make / private: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o600); err != nil {
		return err
	}
	pid := func(name string) int {
		data, _ := os.ReadFile(filepath.Join(dir, name))
		n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		return n
	}
	var leader, orphan int
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		leader, orphan = pid("leader"), pid("orphan")
		if p, err := readStat(orphan); leader != 0 && orphan != 0 && err == nil && p.ppid == 1 {
			if l, err := readStat(leader); err != nil || l.pgrp != p.pgrp || l.ppid != 0 {
				return fmt.Errorf("the session's leader %d is not in the orphan's group %d with a parent outside the namespace: %+v, %v", leader, p.pgrp, l, err)
			}
			break
		}
		if time.Since(start) > 20*time.Second {
			return fmt.Errorf("no session with a member orphaned to PID 1 within 20 s (leader %d, orphan %d)", leader, orphan)
		}
	}
	for killDescendants(0) > 0 {
		reapChildren(nil)
	}
	reapChildren(nil)
	if s := state(orphan); s != "" && s != "Z" && s != "X" {
		return fmt.Errorf("the orphan %d, a child of PID 1, is alive after killDescendants (state %q)", orphan, s)
	}
	time.Sleep(100 * time.Millisecond) // a group's SIGKILL would have landed by now
	if s := state(leader); s == "" || s == "Z" || s == "X" {
		return fmt.Errorf("the session's leader %d, not below PID 1, was killed with the orphan's group (state %q)", leader, s)
	}
	return nil
}

// TestATreeOutlivingItsSIGKILLIsReportedWhileItLives: a step of a watchdog
// that has been sending SIGKILL for longer than half the margin reports
// the tree late then, while it lives (it reported only once the tree was
// gone, so a process in uninterruptible sleep, or out of the sweeps'
// reach, went unreported for as long as it ran).
func TestATreeOutlivingItsSIGKILLIsReportedWhileItLives(t *testing.T) {
	t.Parallel()
	helper(t, "watchdog-late-kill", "")
}

// watchdogLateKillHelper takes one step of a watchdog whose SIGKILL was
// due a second ago, with a margin of 100 ms, and fails unless it logged
// the tree late.
func watchdogLateKillHelper() error {
	var logs strings.Builder
	w := &watchdog{margin: int64(100 * time.Millisecond), log: slog.New(slog.NewTextHandler(&logs, nil)),
		started: true, cmdDone: true, stopping: true, killing: true, killAt: monoNow() - int64(time.Second)}
	w.step()
	if !w.late || !strings.Contains(logs.String(), "the tree gone after SIGKILL") {
		return fmt.Errorf("a step one second after the SIGKILL was due (margin 100 ms) reported nothing: late %v, logs %q", w.late, logs.String())
	}
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
