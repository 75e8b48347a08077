//go:build linux

package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/dbflag/leadership"
)

// holdDefault is --hold when not given: one lease with --skip-if-held (a
// cron entry on every host: hosts whose schedules fire up to a lease
// apart run the job once), else 0 (the flag is released when the command
// exits, so a host waiting for it, with or without --wait, runs it next).
func (o *runOptions) holdDefault() time.Duration {
	if o.skipIfHeld {
		return o.lease
	}
	return 0
}

// holdFlag keeps the flag held, renewed by its loop, until the instant
// until (--hold after this process began to lead), after the command ran
// and exited. A signal ends the hold at once, and so does the end of
// the term (lost or not renewed in time); the caller then releases the
// flag.
func (o *runOptions) holdFlag(f *leadership.Flag, until time.Time, sigs <-chan os.Signal, log *slog.Logger) {
	left := time.Until(until)
	if left <= 0 {
		return
	}
	term, endTerm, ok := f.LeaderContext(context.Background())
	defer endTerm()
	if !ok {
		return
	}
	log.Info("holding the flag until --hold has passed since run began to lead", "name", o.name,
		"hold", o.hold, "left", left.Round(time.Millisecond))
	timer := time.NewTimer(left)
	defer timer.Stop()
	select {
	case <-timer.C:
	case sig := <-sigs:
		log.Info("signal during --hold; releasing the flag now", "signal", sig.String())
	case <-term.Done():
		log.Warn("leadership ended during --hold", "name", o.name)
	}
}
