// Package gocronflag connects leadership flags to the scheduler
// github.com/go-co-op/gocron/v2, so that a fleet of schedulers sharing one
// database runs each job on one instance only.
//
// # Elector
//
// [Elector] makes a [leadership.Flag] a gocron.Elector: gocron asks it
// before every run, and it answers nil only while the flag is raised.
//
//	s, err := gocron.NewScheduler(gocron.WithDistributedElector(gocronflag.Elector(flag)))
//	_, err = s.NewJob(gocron.CronJob("*/2 * * * * *", true), gocron.NewTask(job))
//
// What it guarantees: at most one replica starts runs at any moment, since
// no two flags are raised at once. A run that already started is not
// stopped when leadership moves (gocron cannot stop it): a job that must
// not overlap the next leader's runs watches [leadership.Flag.LeaderContext].
//
// What it does not guarantee: one run per period. Each replica's scheduler
// counts periods on its own. With gocron.DurationJob, or any schedule that
// counts from the scheduler's start, the replicas' ticks fall at different
// instants, so after a handover the new leader can run the job again
// within a period of the old leader's last run, or only after more than a
// period. Use schedules aligned to the wall clock, as
// gocron.CronJob with seconds ("*/2 * * * * *") and gocron.DailyJob are:
// every replica then ticks at the same instants, to within the offset of
// their clocks. A job that must never repeat within a period also records
// its period where the next leader looks (a fenced transaction); a job
// started by a process per run (cron, a systemd timer) uses
// [leadership.FlagBuilder.HoldAtLeast] instead of a scheduler.
//
// Shut down in this order: the scheduler's Shutdown (no new run starts,
// and it waits for running jobs), then [leadership.Flag.Close] (it lowers
// and releases, so another replica takes over at once), then the
// database pool, which Close needs to release the row. The context given
// to [leadership.FlagBuilder.Build] bounds Build only, not the flag.
//
// # Locker
//
// [NewLocker] makes a gocron.Locker from a [leadership.Store]: each run of
// a job takes the row "gocron-lock:<job name>" for one lease (a job name
// too long or not valid as a row name gets a readable start and its
// SHA-256 instead, so distinct jobs never share a row: see [LockName]). It
// fits the row model, but it is weaker than the Elector and gocron
// documents why: a lock is taken per run, so schedulers whose clocks differ
// race for each tick, and a run longer than the lock's lease keeps running
// after the lock could be taken by another scheduler (the locker renews
// the lock while the run lasts, but cannot stop the run if a renewal
// fails). Use it only for per-job mutual exclusion where an occasional
// overlap is harmless; otherwise use the Elector.
package gocronflag

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-co-op/gocron/v2"

	"github.com/dbflag/leadership"
)

// ErrNotLeader is returned by the elector while the flag is lowered.
var ErrNotLeader = errors.New("gocronflag: not the leader")

type elector struct{ flag *leadership.Flag }

var _ gocron.Elector = elector{}

// Elector returns a gocron.Elector that answers nil only while f is
// raised, and an error wrapping [ErrNotLeader] that names the holder
// otherwise.
func Elector(f *leadership.Flag) gocron.Elector { return elector{flag: f} }

// IsLeader implements gocron.Elector.
func (e elector) IsLeader(context.Context) error {
	if e.flag.Raised() {
		return nil
	}
	return fmt.Errorf("%w: flag %q is held by %q", ErrNotLeader, e.flag.Name(), e.flag.Holder())
}
