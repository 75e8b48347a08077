//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// watchdogProc is run's side of one watchdog process (see watchdogName).
type watchdogProc struct {
	pid     int
	cgroup  string        // the command's cgroup, "" for none
	reports <-chan string // the watchdog's reports; closed when it exits

	control *os.File
	mu      sync.Mutex
	pending []string // messages not yet written
	kick    chan struct{}
	closed  bool
}

// startWatchdog starts `leadership __watchdog` for child; it reports
// "ready", then waits for the start message. The watchdog
// runs in a process group of its own, so signals for run's group (a
// terminal's ^C, or kill of the group) do not reach it; it has no
// death signal, so it outlives run to stop the command. With a cgroup
// parent (o.cgroup), the command runs in a cgroup of its own below it.
func (o *runOptions) startWatchdog(child, env []string) (*watchdogProc, error) {
	controlR, controlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	reportsR, reportsW, err := os.Pipe()
	if err != nil {
		controlR.Close()
		controlW.Close()
		return nil, err
	}
	argv := []string{"leadership", watchdogName, "--grace", o.grace.String(), "--margin", (o.lease / 10).String(), "--log-format", o.logFormat}
	if o.cgroup != "" {
		argv = append(argv, "--cgroup", o.cgroup)
	}
	argv = append(append(argv, "--"), child...)
	// /proc/self/exe is this very binary even if the file was replaced or
	// removed since it started.
	pid, err := syscall.ForkExec("/proc/self/exe", argv, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2, controlR.Fd(), reportsW.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	controlR.Close()
	reportsW.Close()
	if err != nil {
		controlW.Close()
		reportsR.Close()
		return nil, fmt.Errorf("start %s: %w", watchdogName, err)
	}
	reports := make(chan string, 4)
	go func() {
		defer reportsR.Close()
		sc := bufio.NewScanner(reportsR)
		for sc.Scan() {
			reports <- sc.Text()
		}
		close(reports)
	}()
	w := &watchdogProc{pid: pid, reports: reports, control: controlW, kick: make(chan struct{}, 1)}
	if o.cgroup != "" {
		w.cgroup = cgroupOf(o.cgroup, pid)
	}
	go w.write()
	return w, nil
}

// send queues a message for the watchdog. It never blocks: a stopped
// watchdog must not stall run. A newer deadline replaces an unsent one.
func (w *watchdogProc) send(msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if strings.HasPrefix(msg, "deadline ") && len(w.pending) > 0 && strings.HasPrefix(w.pending[len(w.pending)-1], "deadline ") {
		w.pending[len(w.pending)-1] = msg
	} else {
		w.pending = append(w.pending, msg)
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// write writes queued messages to the control pipe until close.
func (w *watchdogProc) write() {
	for range w.kick {
		w.mu.Lock()
		batch := w.pending
		w.pending = nil
		w.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		if _, err := w.control.WriteString(strings.Join(batch, "\n") + "\n"); err != nil {
			return // the watchdog is gone
		}
	}
}

// close closes the control pipe: a watchdog still running takes it as the
// order to stop the tree.
func (w *watchdogProc) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.kick)
	}
	w.mu.Unlock()
	w.control.Close()
}

// collect reaps whatever child has exited, without waiting: after its
// last report the watchdog exits by itself (a race-detector build takes a
// second to), and nothing of the tree is left below it.
func (w *watchdogProc) collect() {
	reapChildren(nil)
}

// killBelow sends SIGKILL to every process below the watchdog, again and
// again until none runs, for a watchdog that failed to stop the tree in
// time (it is stopped, or starved): its dead children stay zombies, which
// do not run.
func (w *watchdogProc) killBelow() {
	for w.kill(w.pid) {
		time.Sleep(5 * time.Millisecond)
	}
}

// kill sends SIGKILL to every process of the command's tree: through its
// cgroup if it has one, then to every process below run but skip, and
// reports whether any may still run.
func (w *watchdogProc) kill(skip int) bool {
	populated := w.cgroup != "" && killCgroup(w.cgroup)
	return killDescendants(skip) > 0 || populated
}

// killTree kills the watchdog and every process below run, and reaps them
// all: the processes the dead watchdog leaves are reparented to run, a
// subreaper too.
func (w *watchdogProc) killTree(chld <-chan os.Signal) {
	_ = syscall.Kill(w.pid, syscall.SIGKILL) // a child of run: its pid is not reused before the loop reaps it
	defer os.Remove(w.cgroup)
	for {
		w.kill(0)
		if reapChildren(nil) {
			return
		}
		select {
		case <-chld:
		case <-time.After(5 * time.Millisecond):
		}
	}
}
