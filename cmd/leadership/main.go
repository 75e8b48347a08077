// Command leadership runs a command only on the leader among many hosts
// that share one SQL database, and inspects and manages leadership flags:
// the equivalent of `consul lock` and `etcdctl lock` for a shared SQL
// database.
//
//	leadership run --name nightly -- ./nightly-report   # on every host; one runs it
//	leadership status                                  # who holds what
//	leadership release nightly                         # evict a stuck holder
//	leadership migrate                                 # apply the schema
//	leadership quarantine --for 30s                    # hold every flag after a failover
//
// Run `leadership help` for the commands, flags and exit codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"
)

// Exit codes. A child's own status passes through `run` unchanged (128+N
// when a signal N ended it), so these sit where common commands rarely
// exit (sysexits.h).
const (
	exitOK          = 0
	exitFailure     = 1  // status, release or migrate failed
	exitUsage       = 2  // bad command line
	exitUnavailable = 69 // the database could not be reached or set up at start (EX_UNAVAILABLE)
	exitLost        = 75 // leadership was lost (or the watchdog died) while the child ran; its tree was stopped (EX_TEMPFAIL)
)

const usage = `leadership: run a command only on the leader among processes sharing one SQL database.

Usage:
  leadership run [flags] -- COMMAND [ARGS...]   run COMMAND while this process holds the flag
  leadership status [flags]                     list every flag: holder, version, expiry
  leadership release [flags] NAME               evict the holder of NAME (for a stuck holder)
  leadership migrate [flags]                    apply the schema and report its version
  leadership quarantine [--for D] [flags]       hold every flag: no new term starts for D
                                                (after a failover the database cannot see)
  leadership help | --help | --version

Every command takes --dsn or --dsn-file (default sqlite:leadership.db in the current
directory) and --log-level, --log-format; "leadership COMMAND --help" lists the rest.
Every flag can also be set in the environment as LEADERSHIP_<FLAG> (LEADERSHIP_DSN,
LEADERSHIP_DSN_FILE, LEADERSHIP_LEASE, LEADERSHIP_SKIP_IF_HELD=true, ...); a flag on
the command line wins. Flags may also follow NAME (leadership release NAME --dsn ...),
but not the command of run, whose arguments are its own.

DSN forms: sqlite:PATH; postgres://USER:PASS@HOST:PORT/DB?... or libpq's
host=HOST dbname=DB user=USER password=PASS ...; mysql://USER:PASS@HOST:PORT/DB?... or
go-sql-driver's USER:PASS@tcp(HOST:PORT)/DB?...; a MySQL unix socket as
mysql://USER:PASS@unix(/run/mysqld/mysqld.sock)/DB, USER:PASS@unix(/run/...)/DB or
mysql://USER:PASS@localhost/DB?socket=/run/mysqld/mysqld.sock; add routines=false to a
MySQL DSN for servers without stored procedures.
Passwords: a DSN is never printed, nor is any part that could be a password. --dsn
shows it in ps and LEADERSHIP_DSN to processes that read the environment: prefer
--dsn-file FILE (one line, a file other users cannot read; PostgreSQL also reads
~/.pgpass or PGPASSFILE). run does not pass LEADERSHIP_DSN to its command (--pass-dsn).

Exit codes:
  0    success; for run: the command exited 0, or the flag was held elsewhere
       with --skip-if-held or past --wait
  1    status, release, migrate or quarantine failed
  2    bad usage
  69   the database could not be reached or migrated at start
  75   leadership was lost (or run's watchdog process was killed) while the command
       ran; its whole process tree was stopped
  N    run passes the command's own exit status through (128+S if signal S ended it)
  128+S  signal S ended run before the command started (connecting or waiting)
`

func main() {
	os.Exit(mainWithArgs(os.Args[1:], os.Stdout, os.Stderr))
}

// mainWithArgs runs the command line args and returns the exit code.
func mainWithArgs(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		return runCommand(rest, stderr) // it handles its signals: it forwards them to the child
	case watchdogName: // started by run, not listed in the usage
		return watchdogCommand(rest, stderr)
	case "status":
		return untilSignal(stderr, func(ctx context.Context) int { return statusCommand(ctx, rest, stdout, stderr) })
	case "release":
		return untilSignal(stderr, func(ctx context.Context) int { return releaseCommand(ctx, rest, stdout, stderr) })
	case "migrate":
		return untilSignal(stderr, func(ctx context.Context) int { return migrateCommand(ctx, rest, stdout, stderr) })
	case "quarantine":
		return untilSignal(stderr, func(ctx context.Context) int { return quarantineCommand(ctx, rest, stdout, stderr) })
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "leadership", version())
		return exitOK
	default:
		fmt.Fprintf(stderr, "leadership: unknown command %q\nRun 'leadership help' for usage.\n", cmd)
		return exitUsage
	}
}

// signalGrace is how long a command has to return, after SIGINT, SIGTERM
// or SIGHUP cancelled its context, before it is abandoned.
const signalGrace = time.Second

// untilSignal runs cmd with a context that SIGINT, SIGTERM or SIGHUP
// cancels, and returns its exit code; or, when such a signal came and cmd
// has not returned within signalGrace (a call that ignores its context),
// 128+N at once, so that a signal always ends the command.
func untilSignal(stderr io.Writer, cmd func(context.Context) int) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- cmd(ctx) }()
	select {
	case code := <-done:
		return code
	case sig := <-sigs:
		cancel()
		select {
		case <-done:
		case <-time.After(signalGrace):
		}
		fmt.Fprintf(stderr, "leadership: stopped by %s\n", signalName(sig))
		return 128 + int(sig.(syscall.Signal))
	}
}

// signalName names the signals untilSignal heeds as the shell does.
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}

// version is the module version the binary was built from, or "devel".
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// errUsage marks errors that are the command line's fault.
var errUsage = errors.New("usage")
