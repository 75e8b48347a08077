//go:build linux

package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// watchdogName is the hidden subcommand `leadership run` starts for each
// term: `leadership __watchdog --grace D --margin D [--cgroup DIR]
// [--log-format F] -- COMMAND...`.
//
// The watchdog is the parent of the command, which leads a process group
// of its own, and a child subreaper, so the whole tree of the command stays
// below it. It enforces the trust window itself, on its own timer, so the
// command is stopped in time even if `leadership run` is stopped, starved
// or killed: when the deadline (CLOCK_MONOTONIC nanoseconds) passes
// without an extension, when run asks it to stop, or when its control pipe
// closes (run exited or died), it sends SIGTERM (then SIGCONT) to the
// command's group and to every other process of the tree, and SIGKILL to
// all of them --grace after the earlier of that instant and the deadline:
// through the cgroup the command runs in (--cgroup, see cgroup.go), else
// by sweeps of /proc (killDescendants).
// Before it judges the deadline it reads every message already in the
// pipe, so an extension is never missed while the deadline is ahead; once
// it has passed, no extension is accepted.
// When the command exits by itself the rest of its tree is stopped the
// same way. It reports to run once the tree is gone, and exits.
//
// It measures how late it acts at each of its deadlines: how late it woke
// after the end of the trust window, and how long after the SIGKILL was
// due no process of the tree was left. Later than half of --margin (the
// tenth of the lease between the SIGKILL and the earliest expiry of the
// lease, whose other half absorbs clock-rate drift: docs/cli.md, "The
// watchdog's timing assumption"), the command may have run after another
// host could start it: it logs an error and tells run, which exits
// non-zero.
//
// Protocol, one line per message. Run to watchdog, on fd 3:
//
//	start NS TOKEN start the command with LEADERSHIP_TOKEN=TOKEN; the
//	               trust window ends at NS
//	deadline NS    the trust window now ends at NS (CLOCK_MONOTONIC)
//	signal N       send signal N to the command's process group
//	stop           stop the tree now
//
// Watchdog to run, on fd 4:
//
//	ready          waiting for start
//	started PID    the command runs, as PID (its process group too)
//	failed CODE TEXT  the command could not start; CODE is 126 or 127
//	late           the deadline in start had passed: nothing was started
//	done STATUS CAUSE [late]  the tree is gone; STATUS is the command's
//	               status (128+N for signal N), CAUSE exited, stopped,
//	               deadline, supervisor-gone or terminated; late: the
//	               watchdog was later than --margin/2 after a deadline
const watchdogName = "__watchdog"

// Causes of a stop, as reported in "done".
const (
	causeExited     = "exited"          // the command exited by itself
	causeStopped    = "stopped"         // run asked
	causeDeadline   = "deadline"        // the trust window ended without an extension
	causeSupervisor = "supervisor-gone" // the control pipe closed
	causeTerminated = "terminated"      // the watchdog got SIGTERM
)

// File descriptors of the watchdog's pipes.
const (
	controlFD = 3
	reportsFD = 4
)

// watchdog is the state of `leadership __watchdog`.
type watchdog struct {
	grace    int64 // nanoseconds between SIGTERM and SIGKILL
	margin   int64 // nanoseconds between the SIGKILL and the earliest expiry; half for lateness
	cgroup   string
	log      *slog.Logger
	argv     []string
	deadline int64 // end of the trust window, CLOCK_MONOTONIC nanoseconds

	partial []byte // an incomplete control line
	eof     bool   // the control pipe closed

	started bool
	cmd     int // pid of the command, leader of its process group
	cmdDone bool
	status  int // the command's status once cmdDone

	stopping bool
	cause    string
	killAt   int64 // CLOCK_MONOTONIC nanoseconds
	killing  bool
	late     bool // acted later than margin after a deadline
}

// watchdogCommand runs `leadership __watchdog`.
func watchdogCommand(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(watchdogName, flag.ContinueOnError)
	fs.SetOutput(stderr)
	grace := fs.Duration("grace", 0, "")
	margin := fs.Duration("margin", 0, "")
	cgroup := fs.String("cgroup", "", "")
	logs := common{logLevel: "info"}
	fs.StringVar(&logs.logFormat, "log-format", "text", "")
	var st unix.Stat_t
	err := fs.Parse(args)
	log, lerr := logs.logger(stderr)
	if err != nil || lerr != nil || fs.NArg() == 0 || *grace < 0 ||
		unix.Fstat(controlFD, &st) != nil || unix.Fstat(reportsFD, &st) != nil {
		fmt.Fprintln(stderr, "leadership: "+watchdogName+" is internal to leadership run; do not call it")
		return exitUsage
	}
	// The command must not inherit the pipes: run would not see the
	// reports end while the command lives.
	syscall.CloseOnExec(controlFD)
	syscall.CloseOnExec(reportsFD)
	if err := unix.SetNonblock(controlFD, true); err != nil {
		fmt.Fprintln(stderr, "leadership:", watchdogName+":", err)
		return exitFailure
	}

	// Terminal signals are for run, which forwards them; they must not
	// stop or end the watchdog. (Caught, not ignored: an ignored signal
	// would stay ignored in the command.)
	drop := make(chan os.Signal, 8)
	signal.Notify(drop, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	go func() {
		for range drop {
		}
	}()
	// SIGCHLD and SIGTERM wake the loop through a pipe it polls together
	// with the control pipe.
	var wake [2]int
	if err := unix.Pipe2(wake[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		fmt.Fprintln(stderr, "leadership:", watchdogName+":", err)
		return exitFailure
	}
	var terminated atomic.Bool
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			if s == syscall.SIGTERM {
				terminated.Store(true)
			}
			_, _ = unix.Write(wake[1], []byte{0})
		}
	}()

	w := &watchdog{grace: int64(*grace), margin: int64(*margin), log: log, argv: fs.Args()}
	if *cgroup != "" {
		w.cgroup = cgroupOf(*cgroup, os.Getpid())
		defer os.Remove(w.cgroup) // empty once the tree is gone
	}
	if err := becomeSubreaper(); err != nil {
		w.report("failed %d %v", exitFailure, err)
		return exitFailure
	}
	w.report("ready")
	drain := make([]byte, 64)
	for {
		w.readControl()
		if !w.started {
			if w.eof || w.cmd < 0 {
				return exitOK // run went away, or the start failed or was late
			}
		} else {
			if terminated.Swap(false) {
				w.stop(monoNow(), causeTerminated)
			}
			if reapChildren(w.exited) {
				w.checkDeadline(monoNow()) // run may have killed the tree for a starved watchdog
				break
			}
		}
		timeout := w.step()
		fds := []unix.PollFd{{Fd: int32(wake[0]), Events: unix.POLLIN}}
		if !w.eof {
			fds = append(fds, unix.PollFd{Fd: controlFD, Events: unix.POLLIN})
		}
		_, _ = unix.Ppoll(fds, timeout, nil)
		for {
			if n, _ := unix.Read(wake[0], drain); n <= 0 {
				break
			}
		}
	}
	if w.cause == "" { // nothing stopped it: the command exited, and it was the whole tree
		w.cause = causeExited
	}
	if w.killing {
		w.lateBy("the tree gone after SIGKILL", monoNow()-w.killAt)
	}
	late := ""
	if w.late {
		late = " late"
	}
	w.report("done %d %s%s", w.status, w.cause, late)
	return exitOK
}

// step acts on the clock once the command runs, and returns how long the
// loop may sleep (nil: until a message or signal).
func (w *watchdog) step() *unix.Timespec {
	if !w.started {
		return nil
	}
	w.checkDeadline(monoNow())
	if w.cmdDone {
		w.stop(monoNow(), causeExited) // the rest of the tree
	}
	// The clock is read again: the SIGTERM sweep of a stop above may have
	// run until the SIGKILL was due.
	now := monoNow()
	if w.stopping && now >= w.killAt {
		w.killing = true
	}
	wake := w.deadline
	switch {
	case w.killing:
		// Again at every wake-up until no child is left: a process forked
		// while the tree was scanned is caught by the next scan. A tree
		// that outlives its SIGKILL (a process in uninterruptible sleep)
		// is reported while it does, not only once it is gone.
		w.lateBy("the tree gone after SIGKILL", now-w.killAt)
		w.kill()
		wake = now + int64(10*time.Millisecond)
	case w.stopping:
		wake = w.killAt
	}
	ts := unix.NsecToTimespec(max(wake-now, 0))
	return &ts
}

// checkDeadline stops the tree if now is past the end of the trust window
// and it is not being stopped yet, after measuring how late the watchdog
// woke. (A command that exited meanwhile, or that run killed for a
// starved watchdog, counts as stopped at the deadline.)
func (w *watchdog) checkDeadline(now int64) {
	if w.stopping || now < w.deadline {
		return
	}
	w.lateBy("SIGTERM at the end of the trust window", now-w.deadline)
	w.stop(w.deadline, causeDeadline)
}

// lateBy logs an error, once, if late is longer than half the margin (the
// other half absorbs clock-rate drift): on a starved machine (a
// CPU-throttled cgroup, a swap storm), or with a tree that takes long to
// die, the command may have run after the lease could expire.
func (w *watchdog) lateBy(what string, late int64) {
	if w.late || late <= w.margin/2 {
		return
	}
	w.late = true
	w.log.Error("the command's tree may have run after the lease could expire: the watchdog was later than half the safety margin",
		"at", what, "late", time.Duration(late).Round(time.Millisecond), "limit", time.Duration(w.margin/2))
}

// readControl applies every message already in the control pipe.
func (w *watchdog) readControl() {
	buf := make([]byte, 4096)
	for !w.eof {
		n, err := unix.Read(controlFD, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		if n <= 0 { // end of file, or a broken pipe
			w.eof = true
			if w.started {
				w.stop(monoNow(), causeSupervisor)
			}
			return
		}
		w.partial = append(w.partial, buf[:n]...)
		for {
			line, rest, ok := bytes.Cut(w.partial, []byte("\n"))
			if !ok {
				break
			}
			w.partial = rest
			w.handle(string(line))
		}
	}
}

// start starts the command in a process group of its own. On failure the
// code is what a shell would exit with: 127 not found, 126 not runnable.
func (w *watchdog) start(argv, env []string) (int, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 127, err
		}
		return 126, err
	}
	// Pdeathsig: if the watchdog dies, the command dies with it; run,
	// the next subreaper up, kills the rest of the tree.
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if w.cgroup != "" {
		fd, err := cgroupFD(w.cgroup)
		if err != nil {
			return 126, err
		}
		defer unix.Close(fd)
		sys.UseCgroupFD, sys.CgroupFD = true, fd
	}
	pid, err := forkExec(path, argv, env, sys, w.cgroup == "" && os.Geteuid() != 0)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return 127, fmt.Errorf("%s: %w", argv[0], err)
		}
		return 126, fmt.Errorf("%s: %w", argv[0], err)
	}
	w.cmd = pid
	return 0, nil
}

// forkExec starts the command. With noNewPrivs (the sweeps kill the tree,
// and this process is not root) it forks from a thread with no_new_privs
// set, which the command and its descendants inherit and cannot unset:
// setuid and setgid bits and file capabilities then give them nothing, so
// every process of the tree keeps credentials this process can signal.
// (Without it, `sudo` in the tree would run as root, out of reach of the
// sweeps' SIGKILL.) The flag stays on the thread, which this process
// never uses to start anything else.
func forkExec(path string, argv, env []string, sys *syscall.SysProcAttr, noNewPrivs bool) (int, error) {
	if noNewPrivs {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return 0, fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
		}
	}
	return syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}, Sys: sys})
}

// begin starts the command with the fencing token in its environment and
// the trust window ending at deadline, and reports how it went; after a
// failure or a late start, w.cmd is -1.
func (w *watchdog) begin(deadline int64, token string) {
	if w.started || w.cmd != 0 {
		return
	}
	w.cmd = -1
	if monoNow() >= deadline {
		w.report("late")
		return
	}
	code, err := w.start(w.argv, withEnv(os.Environ(), "LEADERSHIP_TOKEN="+token))
	if err != nil {
		w.report("failed %d %v", code, err)
		return
	}
	w.started, w.deadline = true, deadline
	w.report("started %d", w.cmd)
}

// exited records a reaped child: the command's status, or nothing for a
// process of its tree that was reparented here.
func (w *watchdog) exited(pid int, ws syscall.WaitStatus) {
	if pid == w.cmd {
		w.cmdDone, w.status = true, statusOf(ws)
	}
}

// handle applies one message from run.
func (w *watchdog) handle(m string) {
	verb, arg, _ := strings.Cut(m, " ")
	if verb == "start" {
		deadline, token, _ := strings.Cut(arg, " ")
		if ns, err := strconv.ParseInt(deadline, 10, 64); err == nil {
			w.begin(ns, token)
		}
		return
	}
	if !w.started {
		return
	}
	// Past the deadline the tree must die, whatever run says now: an
	// extension read late (from a starved run, or of another term) is
	// refused, and the lateness reported.
	w.checkDeadline(monoNow())
	switch verb {
	case "deadline":
		if ns, err := strconv.ParseInt(arg, 10, 64); err == nil && !w.stopping {
			w.deadline = ns
		}
	case "signal":
		if n, err := strconv.Atoi(arg); err == nil && !w.cmdDone {
			_ = syscall.Kill(-w.cmd, syscall.Signal(n))
		}
	case "stop":
		w.stop(monoNow(), causeStopped)
	}
}

// stop starts stopping the tree, from the instant from, unless it is
// stopping already: SIGTERM now, SIGKILL grace after from or after the
// deadline, whichever is earlier.
func (w *watchdog) stop(from int64, cause string) {
	if w.stopping {
		return
	}
	w.stopping, w.cause = true, cause
	w.killAt = min(from, w.deadline) + w.grace
	if monoNow() >= w.killAt {
		w.killing = true
		return // no time left for SIGTERM: the loop sends SIGKILL at once
	}
	w.terminate()
}

// terminate sends SIGTERM, then SIGCONT (a stopped process must run to act
// on SIGTERM), to the command's process group while its leader is unreaped
// (until then the group id cannot be reused), and to every other process
// of the tree in one sweep of /proc that ends when the SIGKILL is due, so
// that it never delays the SIGKILL.
func (w *watchdog) terminate() {
	group := 0
	if !w.cmdDone {
		group = w.cmd
		_ = syscall.Kill(-group, syscall.SIGTERM)
		_ = syscall.Kill(-group, syscall.SIGCONT)
	}
	signalDescendants(group, w.killAt, syscall.SIGTERM, syscall.SIGCONT)
}

// kill sends SIGKILL to the command's process group while its leader is
// unreaped, and to every other process of the tree: through the cgroup if
// there is one, then by sweeps of /proc, for what cgroup.kill misses (see
// cgroup.go).
func (w *watchdog) kill() {
	if !w.cmdDone {
		_ = syscall.Kill(-w.cmd, syscall.SIGKILL)
	}
	if w.cgroup != "" {
		killCgroup(w.cgroup)
	}
	killDescendants(0)
}

// report writes one line to run; run may be gone, so errors are ignored.
func (w *watchdog) report(format string, args ...any) {
	_, _ = unix.Write(reportsFD, fmt.Appendf(nil, format+"\n", args...))
}
