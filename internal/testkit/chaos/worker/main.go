//go:build unix

// Command worker is one process of the fault-injection suite (package
// internal/chaos): it opens the store a DSN names, builds a flag and
// samples Raised() about every millisecond until SIGTERM, writing to
// stdout each run of true observations in CLOCK_MONOTONIC nanoseconds
// (the format chaos.ParseReport reads):
//
//	ready                               the flag is built
//	raise START LASTTRUE                a run of true observations began
//	token TOKEN                         the fencing token read in that run
//	lower START LASTTRUE FIRSTFALSE     it ended
//
// START is read just before the first call that returned true, LASTTRUE
// just after the last true one, FIRSTFALSE just after the first false one
// (on SIGTERM: read when the worker stops sampling to call Close, which
// lowers the flag before it releases the row). Each line is written with one
// write(2) as it happens, so a SIGKILLed worker loses at most the end of
// its open run. While raised it also reads Token() at each sample and
// writes a token line after the raise and whenever the token changes.
// Errors go to stderr.
//
//	worker -dsn sqlite:/tmp/f.db -name test-flag [-lease 1s] [-poll 250ms] [-unguarded]
//
// -unguarded (postgres and mysql DSNs) runs the UNGUARDED MUTANT: the flag
// uses a test-only store whose acquire statement is the one from before
// the failover guard (see unguarded.go and unguarded_mysql.go), so that the failover scenarios can
// show they catch what the guard prevents.
//
// With -write TABLE it also runs a leader's job (write.go): while raised,
// it inserts rows (token, seq, holder) into TABLE, in transactions fenced
// with its term (or plain ones with -fence=false).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/internal/testkit/chaos"
)

func main() {
	dsn := flag.String("dsn", "", "store DSN: "+storeopen.Usage)
	name := flag.String("name", "", "flag name")
	lease := flag.Duration("lease", time.Second, "lease")
	poll := flag.Duration("poll", 250*time.Millisecond, "poll interval of a follower")
	sample := flag.Duration("sample", time.Millisecond, "interval between Raised() samples")
	buildFor := flag.Duration("build-timeout", 30*time.Second, "how long to retry Build while the database does not answer")
	verbose := flag.Bool("v", false, "log the flag's transitions to stderr")
	unguarded := flag.Bool("unguarded", false, "use the unguarded mutant store (postgres, mysql; a test of the tests)")
	table := flag.String("write", "", "while leading, insert rows (token, seq, holder) into this table (see write.go)")
	fence := flag.Bool("fence", true, "with -write: fence each transaction with the term (false: a plain transaction)")
	work := flag.Duration("work", 5*time.Millisecond, "with -write: time between taking the term and writing")
	flag.Parse()
	wr := &writer{table: *table, fence: *fence, work: *work}
	if err := run(*dsn, *name, *lease, *poll, *sample, *buildFor, *verbose, *unguarded, wr); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// emit writes one report line with a single write.
func emit(format string, args ...any) {
	if _, err := os.Stdout.WriteString(fmt.Sprintf(format, args...) + "\n"); err != nil {
		fmt.Fprintln(os.Stderr, "worker: write report:", err)
		os.Exit(1)
	}
}

func run(dsn, name string, lease, poll, sample, buildFor time.Duration, verbose, unguarded bool, wr *writer) error {
	if name == "" {
		return fmt.Errorf("-name is mandatory")
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	ctx := context.Background()
	var store leadership.Store
	var o *storeopen.Opened
	if unguarded {
		if wr.table != "" {
			return fmt.Errorf("-write needs the real store, not -unguarded")
		}
		s, closeStore, err := openUnguarded(ctx, dsn)
		if err != nil {
			return err
		}
		defer closeStore()
		store = s
	} else {
		var err error
		if o, err = storeopen.Open(ctx, dsn); err != nil {
			return err
		}
		defer o.Close()
		store = o.Store
	}
	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	b := leadership.NewFlag().Store(store).Name(name).Lease(lease).PollInterval(poll).
		Timeout(lease / 5).Migrate(false).Logger(logger)
	var f *leadership.Flag
	var err error
	for deadline := time.Now().Add(buildFor); ; {
		if f, err = b.Build(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(poll)
	}
	if wr.table != "" {
		wr.o, wr.f = o, f
		wr.done, wr.quit = make(chan struct{}), make(chan struct{})
		go wr.run()
	}
	emit("ready")

	var start, lastTrue int64 // start == 0: no open run
	var token int64           // the last token written in the open run
	tick := time.NewTicker(sample)
	defer tick.Stop()
	for {
		select {
		case <-term:
			// The worker stops observing here: its run ends now. Close
			// lowers the flag before it releases the row, so no other
			// process can raise before this instant.
			stopped := chaos.Mono()
			if wr.table != "" {
				wr.close()
			}
			err := f.Close()
			if f.Raised() {
				return fmt.Errorf("Raised() true after Close")
			}
			if start != 0 {
				emit("lower %d %d %d", start, lastTrue, stopped)
			}
			return err
		case <-tick.C:
		}
		t0 := chaos.Mono()
		up := f.Raised()
		t1 := chaos.Mono()
		switch {
		case up && start == 0:
			start, lastTrue, token = t0, t1, 0
			emit("raise %d %d", start, lastTrue)
		case up:
			lastTrue = t1
		case start != 0:
			emit("lower %d %d %d", start, lastTrue, t1)
			start = 0
		}
		// Token is false once the term has ended since Raised: nothing
		// to report then, the next sample lowers.
		if tok, ok := f.Token(); up && ok && tok != token {
			token = tok
			emit("token %d", token)
		}
	}
}
