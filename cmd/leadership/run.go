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
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dbflag/leadership"
)

const runExamples = `  # A daemon that must run on exactly one host: start it on every host.
  leadership run --dsn postgres://app@db/app --name indexer -- ./indexer --serve

  # A cron entry installed on every host: the first to start runs the job,
  # the others exit 0 at once.
  leadership run --dsn mysql://app:pw@db:3306/app --name nightly --skip-if-held -- ./nightly-report

  # Try it locally: two processes, one file; the second waits, then runs.
  leadership run --name hello -- sh -c 'echo "$$ leads"; sleep 3' &
  leadership run --name hello -- sh -c 'echo "$$ leads"; sleep 3'

The command gets LEADERSHIP_NAME and LEADERSHIP_TOKEN (the fencing token: the
flag's version, larger at every new term) in its environment. If leadership
is lost while it runs (the database is unreachable for a lease, or an
operator ran "leadership release"), it gets SIGTERM, then SIGKILL after
--grace; both happen before the lease can expire in the database, so no
other host starts the command while this one still runs it.
`

// runOptions are the flags of `leadership run`.
type runOptions struct {
	common
	name, process, metricsAddr string
	lease, grace, wait, hold   time.Duration
	skipIfHeld, restart        bool
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
	fs.DurationVar(&o.hold, "hold", 0, "keep the flag held until this long after the command started, even if it exits sooner, then release it;\n"+
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
	// Signals: while waiting they end the run; while the command runs they
	// are forwarded to it, and the flag is released when it exits.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	ctx := context.Background()
	store, err := o.open(ctx)
	if err != nil {
		return report(stderr, err, exitUnavailable)
	}
	defer store.Close()

	reg := prometheus.NewRegistry()
	if o.metricsAddr != "" {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		stopMetrics, err := serveMetrics(o.metricsAddr, reg, log)
		if err != nil {
			return report(stderr, fmt.Errorf("%w: --metrics-addr: %v", errUsage, err), exitUsage)
		}
		defer stopMetrics()
	}

	// The command must be dead before the database can let anyone else
	// acquire: the flag lowers SafetyMargin before that instant, and the
	// command gets SIGKILL --grace after the lowering, so the margin covers
	// the grace period on top of the usual tenth of the lease.
	f, err := leadership.NewFlag().Store(store.Store).Name(o.name).Process(o.process).Lease(o.lease).
		RenewInterval(o.lease / 4).SafetyMargin(o.lease/10 + o.grace).
		Logger(log).MetricsRegisterer(reg).Build(ctx)
	if err != nil {
		if errors.Is(err, leadership.ErrInvalidArgument) {
			return report(stderr, fmt.Errorf("%w: %v", errUsage, err), exitUsage)
		}
		return report(stderr, err, exitUnavailable)
	}
	defer f.Close()

	for {
		if !f.Raised() {
			if o.skipIfHeld {
				log.Info("flag held by another process; skipping", "name", o.name, "holder", f.Holder())
				return exitOK
			}
			if code, done := o.waitToLead(f, sigs, log); done {
				return code
			}
		}
		leading := time.Now()
		code, outcome := o.runChild(f, child, sigs, log)
		switch outcome {
		case notLeading:
			continue // lowered before the command started: wait again
		case exited:
			// The command ended: release (after --hold) so another process
			// can take over without waiting for the lease.
			o.holdFlag(f, leading.Add(o.hold), sigs, log)
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

// outcome is how one term of running the command ended.
type outcome int

const (
	exited     outcome = iota // the command exited by itself (or after a forwarded signal)
	lost                      // leadership ended first; the command was stopped
	notLeading                // the flag lowered before the command started
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
	log.Info("waiting for leadership", "name", o.name, "holder", f.Holder())
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
// exit code and how the term ended.
func (o *runOptions) runChild(f *leadership.Flag, child []string, sigs <-chan os.Signal, log *slog.Logger) (int, outcome) {
	term, endTerm, ok := f.LeaderContext(context.Background())
	defer endTerm()
	if !ok {
		return 0, notLeading
	}
	token, _ := f.Token()
	cmd := exec.Command(child[0], child[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "LEADERSHIP_NAME="+o.name, "LEADERSHIP_TOKEN="+strconv.FormatInt(token, 10))
	// If this process dies (SIGKILL), the kernel kills the command too:
	// no orphan keeps running without a leader.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Error("cannot start the command", "command", child[0], "error", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 127, exited
		}
		return 126, exited
	}
	log.Info("leading; command started", "name", o.name, "token", token, "pid", cmd.Process.Pid)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	for {
		select {
		case <-done:
			code := exitCode(cmd.ProcessState)
			log.Info("command exited", "status", code)
			return code, exited
		case sig := <-sigs:
			log.Info("forwarding signal to the command", "signal", sig.String())
			_ = cmd.Process.Signal(sig)
		case <-term.Done():
			log.Warn("leadership lost; stopping the command", "name", o.name, "grace", o.grace)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(o.grace):
				log.Warn("command still running after --grace; killing it")
				_ = cmd.Process.Kill()
				<-done
			}
			log.Info("command stopped", "status", exitCode(cmd.ProcessState))
			return exitLost, lost
		}
	}
}

// exitCode is the status a shell would report for the command.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
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
