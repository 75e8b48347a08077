//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
)

const runExamples = `  # A daemon that must run on exactly one host: start it on every host.
  leadership run --dsn postgres://app@db/app --name indexer -- ./indexer --serve

  # A cron entry installed on every host: the first to start runs the job,
  # the others exit 0 at once. The flag stays held for --hold after the job
  # started (one --lease by default with --skip-if-held), so hosts whose cron
  # fires up to that far apart run it once; raise it if they drift further.
  leadership run --dsn mysql://app:pw@db:3306/app --name nightly --skip-if-held -- ./nightly-report

  # Try it locally: two processes, one file; the second waits, then runs.
  leadership run --name hello -- sh -c 'echo "$$ leads"; sleep 3' &
  leadership run --name hello -- sh -c 'echo "$$ leads"; sleep 3'

The command gets LEADERSHIP_NAME, LEADERSHIP_HOLDER (the holder name of this
run) and LEADERSHIP_TOKEN (the fencing token: the flag's version, larger at
every new term) in its environment; with them, its transactions on the
flag's database can be fenced (see "Fencing" in the README). It runs in a
process group of its own under a watchdog process (leadership __watchdog);
the watchdog and run are child subreapers, so every process the command
starts stays below them, even after setsid. If leadership is lost while it
runs (the database is unreachable for a lease, or an operator ran
"leadership release"), or run is stopped or killed, or the command exits
leaving processes behind, every process of the tree gets SIGTERM, then
SIGKILL after --grace; the watchdog does it on its own clock at the end of
the trust window, so all of it happens before the lease can expire in the
database and no other host starts the command while this one still runs it.
Where run can create a cgroup v2 (as root, or in a delegated cgroup), the
command runs in one of its own and SIGKILL goes through cgroup.kill, which
reaches every process of it at once; elsewhere through sweeps of /proc,
which stop what they find before killing it, but which a process forking
and exiting faster than a sweep (a fork relay) can outrun for a while; a
run that is not root then starts the command with no_new_privs, so that
setuid programs (sudo) give the tree no credentials it cannot kill. run
logs which at start. Signals sent to run are forwarded to the command's
process group; before the command starts (connecting, waiting) they end run
with 128+N.

Not covered: run and its watchdog both killed or both stopped (if the
watchdog and the command are resumed together after the deadline, the
command may run a few milliseconds before the watchdog kills it); a
watchdog starved for longer than a twentieth of the lease past its
deadline (it logs an error then, and run exits non-zero); processes
started outside the tree (systemd-run, at, ssh); processes in
uninterruptible sleep, which die when their I/O returns. Linux only;
details, and the clock-rate assumption, in docs/cli.md.
`

// runOptions are the flags of `leadership run`.
type runOptions struct {
	common
	name, process, metricsAddr string
	lease, grace, wait, hold   time.Duration
	skipIfHeld, restart        bool

	cgroup string         // the cgroup below which each command gets its own, "" for none
	chld   chan os.Signal // SIGCHLD, to reap the watchdog and what it leaves
}

// runCommand runs `leadership run`; the command writes to this process's
// own stdout and stderr.
func runCommand(args []string, stderr io.Writer) int {
	var o runOptions
	fs := newFlagSet("run", "run [flags] -- COMMAND [ARGS...]", runExamples, stderr, &o.common)
	fs.StringVar(&o.name, "name", "", "flag name (mandatory): processes using the same name compete")
	fs.StringVar(&o.process, "process", "", "holder name written to the database (default: hostname-pid-random)")
	fs.DurationVar(&o.lease, "lease", leadership.DefaultLease, "lease: a crashed leader is replaced about this long after its last renewal")
	fs.DurationVar(&o.grace, "grace", 0, "after leadership is lost, wait this long between SIGTERM and SIGKILL of the command; less than 0.4 × --lease (default --lease/5: 3s at the default lease)")
	fs.BoolVar(&o.skipIfHeld, "skip-if-held", false, "if another process holds the flag, exit 0 at once (for cron)")
	fs.DurationVar(&o.wait, "wait", 0, "wait at most this long for leadership, then exit 0 (default: as long as it takes)")
	fs.DurationVar(&o.hold, "hold", 0, "keep the flag held until this long after run began to lead (just before the command starts), even if the command exits sooner, then release it;\n"+
		"hosts whose schedules fire within --hold of each other then run the command once (default: one --lease with --skip-if-held, else 0)")
	fs.BoolVar(&o.restart, "restart", false, "when leadership is lost, stop the command, wait to lead again and start it again, instead of exiting 75")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this address (for example :9090) while running")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if !isSet(fs, "grace") {
		o.grace = o.lease / 5
	}
	if !isSet(fs, "hold") {
		o.hold = o.holdDefault()
	}
	child := fs.Args()
	if err := o.check(child); err != nil {
		return usageError(stderr, "run", err)
	}
	log, err := o.logger(stderr)
	if err != nil {
		return report(stderr, err, exitUsage)
	}
	return o.run(child, log, stderr)
}

// check validates the options before the database is opened, in terms of
// the command-line flags (Build checks --lease and --grace again, as Lease
// and SafetyMargin).
func (o *runOptions) check(child []string) error {
	if len(child) == 0 {
		return fmt.Errorf("%w: no command: write it after --, for example: leadership run --name job -- ./job", errUsage)
	}
	if o.name == "" {
		return fmt.Errorf("%w: --name is mandatory", errUsage)
	}
	if o.lease < leadership.MinLease {
		return fmt.Errorf("%w: --lease %v is shorter than the minimum %v", errUsage, o.lease, leadership.MinLease)
	}
	if o.grace < 0 || o.grace >= o.lease*2/5 {
		return fmt.Errorf("%w: --grace %v must be between 0 and 0.4 × --lease (%v): the command must be stopped before the lease can expire; raise --lease or lower --grace",
			errUsage, o.grace, o.lease*2/5)
	}
	if o.wait < 0 {
		return fmt.Errorf("%w: --wait %v is negative", errUsage, o.wait)
	}
	if o.hold < 0 {
		return fmt.Errorf("%w: --hold %v is negative", errUsage, o.hold)
	}
	return nil
}

func (o *runOptions) run(child []string, log *slog.Logger, stderr io.Writer) int {
	// Signals: while connecting or waiting they end the run; while the
	// command runs they are forwarded to it, and the flag is released when
	// it exits.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	o.chld = make(chan os.Signal, 1)
	signal.Notify(o.chld, syscall.SIGCHLD)
	defer signal.Stop(o.chld)
	// A subreaper: if the watchdog dies, the command's processes are
	// reparented here, where they can still be found and killed.
	if err := becomeSubreaper(); err != nil {
		return report(stderr, err, exitFailure)
	}
	if err := checkProcNamespace(); err != nil {
		return report(stderr, err, exitFailure)
	}
	cgroup, err := cgroupParent()
	if err == nil {
		o.cgroup = cgroup
		log.Info("the command's process tree runs in a cgroup of its own, killed with cgroup.kill", "below", cgroup)
	} else {
		log.Info("the command's process tree is found by sweeps of /proc: no cgroup v2 to create (run as root, or in a delegated cgroup, for cgroup.kill)", "why", err.Error())
		if os.Geteuid() != 0 {
			log.Info("the command runs with no_new_privs: setuid programs (sudo) and file capabilities give the tree no credentials that the sweeps could not kill")
		}
	}

	reg := prometheus.NewRegistry()
	if o.metricsAddr != "" {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		stopMetrics, err := serveMetrics(o.metricsAddr, reg, log)
		if err != nil {
			return report(stderr, fmt.Errorf("%w: --metrics-addr: %v", errUsage, err), exitUsage)
		}
		defer stopMetrics()
	}

	store, f, code := o.build(reg, log, sigs, stderr)
	if f == nil {
		return code
	}
	defer closeStore(store, log)
	defer f.Close()

	for {
		raised := f.Raised()
		if !raised && o.skipIfHeld {
			if f.Holder() == "" {
				log.Info("flag not raised, and no process holds it: new terms wait for an evicted term's expiry or a failover hold (leadership status shows which); skipping", "name", o.name)
			} else {
				log.Info("flag held by another process; skipping", "name", o.name, "holder", f.Holder())
			}
			return exitOK
		}
		// The watchdog starts before the wait, to be ready when this
		// process leads: starting a process takes time.
		w, err := o.startWatchdog(child, o.commandEnv("LEADERSHIP_NAME="+o.name, "LEADERSHIP_HOLDER="+f.Process()))
		if err != nil {
			log.Error("cannot start the watchdog process", "error", err)
			return exitFailure
		}
		if !raised {
			if code, done := o.waitToLead(f, sigs, log); done {
				w.close()
				w.collect()
				return code
			}
		}
		leading := time.Now()
		code, outcome := o.runChild(f, w, child, sigs, log)
		switch outcome {
		case notLeading:
			continue // lowered before the command started: wait again
		case exited, notStarted:
			// The command ended: release (after --hold, if it ran) so
			// another process can take over without waiting for the lease.
			if outcome == exited {
				o.holdFlag(f, leading.Add(o.hold), sigs, log)
			}
			if err := f.Close(); err != nil {
				log.Warn("releasing the flag failed; another process takes over when the lease expires", "error", err)
			}
			return code
		}
		if !o.restart {
			return exitLost
		}
	}
}

// build opens the database and builds the flag, or returns the exit code
// and a nil flag. Connecting can block for long (a server that does not
// answer, a schema another process is migrating), so SIGINT, SIGTERM or
// SIGHUP meanwhile ends it at once with 128+N.
func (o *runOptions) build(reg *prometheus.Registry, log *slog.Logger, sigs <-chan os.Signal, stderr io.Writer) (*storeopen.Opened, *leadership.Flag, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type built struct {
		store *storeopen.Opened
		f     *leadership.Flag
		err   error
	}
	done := make(chan built, 1)
	go func() {
		store, err := o.open(ctx)
		if err != nil {
			done <- built{err: err}
			return
		}
		// The command must be dead before the database can let anyone else
		// acquire: the flag lowers SafetyMargin before that instant, and the
		// command gets SIGKILL --grace after the lowering, so the margin
		// covers the grace period on top of the usual tenth of the lease.
		f, err := leadership.NewFlag().Store(store.Store).Name(o.name).Process(o.process).Lease(o.lease).
			RenewInterval(o.lease / 4).SafetyMargin(o.lease/10 + o.grace).
			Logger(log).MetricsRegisterer(reg).Build(ctx)
		if err != nil {
			store.Close()
			if errors.Is(err, leadership.ErrInvalidArgument) {
				err = fmt.Errorf("%w: %v", errUsage, err)
			}
			done <- built{err: err}
			return
		}
		done <- built{store: store, f: f}
	}()
	select {
	case b := <-done:
		if b.err != nil {
			return nil, nil, report(stderr, b.err, exitUnavailable)
		}
		return b.store, b.f, exitOK
	case sig := <-sigs:
		cancel()
		fmt.Fprintf(stderr, "leadership: %s while connecting to the database; exiting without running the command\n", unix.SignalName(sig.(syscall.Signal)))
		// Build may have acquired the flag just now: if it returns soon,
		// release the flag rather than leave it to expire.
		select {
		case b := <-done:
			if b.f != nil {
				_ = b.f.Close()
				b.store.Close()
			}
		case <-time.After(time.Second):
		}
		return nil, nil, 128 + int(sig.(syscall.Signal))
	}
}

// closeStore closes the database connections, but waits at most a second:
// a pool whose server stopped answering can take long to close (pgx waits
// up to 15 s per connection), and exiting closes them anyway.
func closeStore(store *storeopen.Opened, log *slog.Logger) {
	closed := make(chan struct{})
	go func() {
		store.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(time.Second):
		log.Debug("closing the database connections takes long; exiting without waiting")
	}
}

// outcome is how one term of running the command ended.
type outcome int

const (
	exited     outcome = iota // the command exited by itself (or after a forwarded signal)
	lost                      // leadership ended first; the command was stopped
	notLeading                // the flag lowered before the command started
	notStarted                // the command could not be started, or a signal came first: run exits
)

// waitToLead blocks until f is raised, --wait passes or a signal arrives;
// done says the run is over with code.
func (o *runOptions) waitToLead(f *leadership.Flag, sigs <-chan os.Signal, log *slog.Logger) (code int, done bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if o.wait > 0 {
		ctx, cancel = context.WithTimeout(ctx, o.wait)
		defer cancel()
	}
	if f.Holder() == "" {
		log.Info("waiting for leadership", "name", o.name, "holder", "", "why", "no process holds the flag: new terms wait for an evicted term's expiry or a failover hold (leadership status shows which)")
	} else {
		log.Info("waiting for leadership", "name", o.name, "holder", f.Holder())
	}
	waited := make(chan error, 1)
	go func() { waited <- f.Wait(ctx) }()
	select {
	case err := <-waited:
		switch {
		case err == nil:
			return 0, false
		case errors.Is(err, context.DeadlineExceeded):
			log.Info("not the leader within --wait; exiting", "name", o.name, "wait", o.wait, "holder", f.Holder())
			return exitOK, true
		default:
			log.Error("waiting for leadership failed", "error", err)
			return exitFailure, true
		}
	case sig := <-sigs:
		cancel()
		<-waited
		log.Info("signal while waiting; exiting", "signal", sig.String())
		return 128 + int(sig.(syscall.Signal)), true
	}
}

// runChild runs the command for one term of leadership and reports its
// exit code and how the term ended. The command runs below a watchdog
// process (see watchdogName) that stops its whole process tree at the end
// of the trust window even if this process cannot act; this process sends
// it each extension of the window, forwards signals through it, and kills
// the tree itself if the watchdog fails to.
func (o *runOptions) runChild(f *leadership.Flag, w *watchdogProc, child []string, sigs <-chan os.Signal, log *slog.Logger) (int, outcome) {
	defer w.collect() // after close: a watchdog that was not started exits at the end of its pipe
	defer w.close()
	term, endTerm, ok := f.LeaderContext(context.Background())
	defer endTerm()
	if !ok {
		return 0, notLeading
	}
	token, _ := f.Token()

	// Until the watchdog is ready, nothing runs: a signal or the end of
	// the term ends the attempt. (The deadline is read only once it is
	// ready: starting a process can take long on a loaded machine.)
	select {
	case r := <-w.reports:
		if r != "ready" {
			w.killTree(o.chld)
			log.Error("the watchdog process failed", "report", r)
			return exitFailure, notStarted
		}
	case sig := <-sigs:
		log.Info("signal before the command started; exiting", "signal", sig.String())
		return 128 + int(sig.(syscall.Signal)), notStarted
	case <-term.Done():
		return 0, notLeading
	}
	sent, raised := termDeadline(f, token)
	if !raised {
		return 0, notLeading
	}
	w.send(fmt.Sprintf("start %d %d", monoOf(sent), token))

	// The watchdog learns each renewal within a tick; a renewal comes
	// about three quarters of a lease before the window it extends ends.
	tick := time.NewTicker(min(max(o.lease/20, time.Millisecond), 100*time.Millisecond))
	defer tick.Stop()
	termDone := term.Done()
	var fallback, giveUp <-chan time.Time
	for {
		select {
		case r, ok := <-w.reports:
			verb, arg, _ := strings.Cut(r, " ")
			switch {
			case !ok:
				// The watchdog died without reporting: nothing enforces the
				// deadline but this process. Kill the tree at once.
				w.killTree(o.chld)
				log.Error("the watchdog process died; killed the command's processes", "name", o.name)
				return exitLost, lost
			case verb == "started":
				log.Info("leading; command started", "name", o.name, "token", token, "pid", arg, "watchdog", w.pid)
			case verb == "late":
				log.Warn("the trust window ended before the command could start; waiting to lead again", "name", o.name)
				return 0, notLeading
			case verb == "failed":
				code, text, _ := strings.Cut(arg, " ")
				status, err := strconv.Atoi(code)
				if err != nil {
					status = 126
				}
				log.Error("cannot start the command", "command", child[0], "error", text)
				return status, notStarted
			case verb == "done":
				log.Debug("watchdog reported", "report", r)
				status, cause, late := parseDone(arg)
				if late && status == 0 {
					status = exitFailure // the watchdog logged why
				}
				if cause == causeExited {
					log.Info("command exited", "status", status)
					return status, exited
				}
				if cause == causeDeadline && termDone != nil {
					log.Warn("the watchdog stopped the command at the end of the trust window before this process saw the term end", "name", o.name)
				}
				log.Info("command stopped", "status", status)
				return exitLost, lost
			}
		case sig := <-sigs:
			log.Info("forwarding signal to the command", "signal", sig.String())
			w.send(fmt.Sprintf("signal %d", sig.(syscall.Signal)))
		case <-tick.C:
			if d, ok := termDeadline(f, token); ok && d.After(sent) {
				sent = d
				w.send(fmt.Sprintf("deadline %d", monoOf(d)))
				log.Debug("watchdog deadline extended", "in", time.Until(d).Round(time.Millisecond))
			}
		case <-termDone:
			termDone = nil
			log.Warn("leadership lost; stopping the command", "name", o.name, "grace", o.grace)
			w.send("stop")
			// The watchdog sends SIGKILL --grace after the earlier of now
			// and the deadline; if it has not reported by then, this
			// process kills the tree itself.
			now := time.Now()
			if sent.Before(now) {
				now = sent
			}
			fallback = time.After(time.Until(now.Add(o.grace)))
		case <-fallback:
			// Normally the watchdog is sending SIGKILL at this very
			// instant; if it is stopped or starved, this does it. Then the
			// watchdog has a second to report before it is killed too.
			fallback = nil
			w.killBelow()
			giveUp = time.After(time.Second)
		case <-giveUp:
			log.Warn("the watchdog process did not report; killed it", "name", o.name, "watchdog", w.pid)
			w.killTree(o.chld)
			log.Info("command stopped")
			return exitLost, lost
		}
	}
}

// parseDone parses the arguments of the watchdog's "done STATUS CAUSE [late]".
func parseDone(arg string) (status int, cause string, late bool) {
	f := strings.Fields(arg)
	f = append(f, "", "", "")
	status, err := strconv.Atoi(f[0])
	if err != nil {
		status = -1
	}
	return status, f[1], f[2] == "late"
}

// serveMetrics serves reg on addr until the returned function is called.
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	log.Info("serving metrics", "addr", l.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// termDeadline returns the end of the trust window of the term whose
// fencing token is token, and true; or false once f no longer leads in
// that term. TrustDeadline alone may give a later term's: one term can
// end and another begin at any instant. The flag's terms have increasing
// tokens, so the deadline read between a Token of token (the caller's)
// and another is of token's term when the second agrees.
func termDeadline(f *leadership.Flag, token int64) (time.Time, bool) {
	d, ok := f.TrustDeadline()
	now, leading := f.Token()
	return d, ok && leading && now == token
}
