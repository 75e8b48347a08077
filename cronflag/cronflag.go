// Package cronflag runs github.com/robfig/cron/v3 jobs only on the leader:
// a cron.JobWrapper that skips a run unless a leadership flag is raised,
// and hands jobs that want one a context cancelled when leadership is
// lost.
//
//	c := cron.New(cron.WithChain(cronflag.Wrapper(flag)))
//	c.AddJob("@every 1m", cronflag.JobFunc(func(ctx context.Context) {
//		// ctx is cancelled the moment this process stops leading
//	}))
//
// Every process runs the same cron schedule; only the one holding the flag
// runs the jobs. A run starts only while the flag is raised, and its
// context ends when the term ends (at the latest at the end of the trust
// window, before another process can raise), so a job that watches its
// context stops before another process starts the same job. A job that
// ignores the context keeps running: the flag cannot stop it.
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
