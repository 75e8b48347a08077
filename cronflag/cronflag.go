// Package cronflag runs github.com/robfig/cron/v3 jobs only on the leader:
// a cron.JobWrapper that skips a run unless a leadership flag is raised,
// and hands jobs that want one a context cancelled when leadership is
// lost.
//
//	c := cron.New(cron.WithSeconds(), cron.WithChain(cronflag.Wrapper(flag)))
//	c.AddJob("0 0 3 * * *", cronflag.JobFunc(func(ctx context.Context) {
//		// ctx is cancelled the moment this process stops leading
//	}))
//
// Every process runs the same cron schedule; only the one holding the flag
// runs the jobs.
//
// What it guarantees: at most one replica runs a [ContextJob] that watches
// its context at any moment. A run starts only while the flag is raised,
// and its context ends when the term ends (at the latest at the end of the
// trust window, before another process can raise), so a job that watches
// its context stops before another process starts the same job. A job
// that ignores the context keeps running: the flag cannot stop it.
//
// What it does not guarantee: one run per period. Each replica's cron
// counts on its own; "@every 1m" counts from each replica's start, so
// after a handover the new leader can run the job soon after the old
// leader's last run, or later than a period. Use schedules aligned to the
// wall clock (a cron expression; with cron.WithSeconds for periods under a
// minute): every replica then ticks at the same instants, to within the
// offset of their clocks. A job that must never repeat within a period
// also records its period where the next leader looks (a fenced
// transaction); a job started by a process per run (cron, a systemd
// timer) uses [leadership.FlagBuilder.HoldAtLeast] instead.
//
// Shut down in this order: <-c.Stop().Done() (no new run starts, and it
// waits for running jobs), then [leadership.Flag.Close] (it lowers and
// releases, so another replica takes over at once), then the database
// pool, which Close needs to release the row. The context given to
// [leadership.FlagBuilder.Build] bounds Build only, not the flag.
package cronflag

import (
	"context"

	"github.com/robfig/cron/v3"

	"github.com/dbflag/leadership"
)

// ContextJob is a job that accepts the leadership context. Jobs that only
// implement cron.Job run without one.
type ContextJob interface {
	cron.Job
	RunContext(ctx context.Context)
}

// JobFunc adapts a function to [ContextJob]. Run, when called outside a
// Wrapper, passes context.Background().
type JobFunc func(ctx context.Context)

// Run implements cron.Job.
func (f JobFunc) Run() { f(context.Background()) }

// RunContext implements [ContextJob].
func (f JobFunc) RunContext(ctx context.Context) { f(ctx) }

// Wrapper returns a cron.JobWrapper that runs a job only while f is
// raised. A [ContextJob] receives a context cancelled when this term of
// leadership ends; the wrapper returns after the job does.
func Wrapper(f *leadership.Flag) cron.JobWrapper {
	return func(job cron.Job) cron.Job {
		return cron.FuncJob(func() {
			ctx, cancel, leading := f.LeaderContext(context.Background())
			defer cancel()
			if !leading {
				return
			}
			if cj, ok := job.(ContextJob); ok {
				cj.RunContext(ctx)
				return
			}
			job.Run()
		})
	}
}
