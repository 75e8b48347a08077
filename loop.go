package leadership

import (
	"context"
	"log/slog"
	"time"
)

// run is the background loop: one goroutine, one timer, woken early by
// release notifications (at most once per wakeGap), stopped by Close.
func (f *Flag) run(delay time.Duration) {
	defer close(f.loopDone)
	timer := time.NewTimer(delay)
	defer timer.Stop()
	due := f.now() + int64(delay)
	var (
		nextWake int64 // the earliest instant a notification may bring an attempt
		woken    bool  // the timer was brought forward by a notification
	)
	for {
		select {
		case <-f.loopCtx.Done():
			return
		case <-timer.C:
		case <-f.wake:
			woken = true
			if now := f.now(); now < nextWake {
				// Coalesced: one attempt at nextWake for every
				// notification until then, unless one is due sooner.
				if nextWake < due {
					timer.Reset(time.Duration(nextWake - now))
					due = nextWake
				}
				continue
			}
		}
		if f.loopCtx.Err() != nil {
			// Close raced with a wake-up and select picked the wake-up: make
			// no attempt with a cancelled context (a vetoed one would drop
			// the term without releasing it, and Close would then skip the
			// release).
			return
		}
		if woken {
			nextWake, woken = f.now()+int64(f.wakeGap()), false
		}
		delay, _ = f.attemptWith(f.loopCtx)
		timer.Reset(delay)
		due = f.now() + int64(delay)
	}
}

// wakeGap is the least time between two attempts that release
// notifications bring forward: Lease/20, the default jitter, by which a
// scheduled attempt may come late anyway. A notification is a hint anyone
// may send (on PostgreSQL any role that can connect can NOTIFY), so a
// flood of them costs a flag at most one attempt more per wakeGap, while
// the first notification after a quiet wakeGap (a genuine release) wakes
// the flag at once.
func (f *Flag) wakeGap() time.Duration { return f.c.lease / 20 }

// attemptWith makes one attempt (precheck, then acquire or renew) and
// returns how long to wait before the next one, and the database error if
// the attempt failed.
func (f *Flag) attemptWith(ctx context.Context) (time.Duration, error) {
	defer func() { f.lastAttemptDone.Store(f.now()) }()
	if f.c.precheck != nil {
		f.checkSuspend(ctx) // the precheck may take Timeout: lower before it
		pctx, cancel := context.WithTimeout(ctx, f.c.timeout)
		err := f.c.precheck(pctx)
		cancel()
		if err != nil {
			f.veto(ctx, err)
			return f.pollInterval(), nil
		}
	}
	f.mu.Lock()
	version := f.term.version
	f.mu.Unlock()

	atSend := f.checkSuspend(ctx)
	sent := f.now() // the trust window counts from before the request leaves
	actx, cancel := context.WithTimeout(ctx, f.c.timeout)
	res, err := f.c.store.Acquire(actx, Request{Name: f.c.name, Holder: f.c.process, Version: version, Lease: f.c.lease})
	cancel()
	_, suspended := f.lowerIfSuspended(ctx, atSend)
	seconds := time.Duration(f.now() - sent).Seconds()

	if err != nil {
		f.m.observeAttempt("error", seconds)
		f.m.countError("acquire")
		f.failures++
		if ctx.Err() == nil {
			f.log.LogAttrs(ctx, slog.LevelWarn, "attempt failed",
				slog.Int64("version", version), slog.Int("failures", f.failures), slog.Any("error", err))
		}
		return f.retryDelay(version != 0), err
	}
	f.failures = 0
	if res.Acquired && suspended {
		f.m.observeAttempt("acquired", seconds)
		f.untrusted(res)
		f.failures++ // renew from a new send soon, with backoff if it recurs
		return f.retryDelay(true), nil
	}
	if res.Acquired {
		f.m.observeAttempt("acquired", seconds)
		f.acquired(ctx, res, sent)
		f.susp.window = atSend
		return f.renewDelay(), nil
	}
	f.m.observeAttempt("held_by_other", seconds)
	f.lost(ctx, res)
	return f.followDelay(res), nil
}

// followDelay schedules a follower's next attempt for the holder's expiry
// by the database clock, plus jitter, and at most one poll interval away.
func (f *Flag) followDelay(res Result) time.Duration {
	wait := max(res.ExpiresAt.Sub(res.Now), 0) + f.randomJitter()
	// The floor keeps a follower from spinning when a losing result
	// reports no expiry (a row it could not read).
	poll := f.pollInterval()
	return max(min(wait, poll), min(10*time.Millisecond, poll))
}

// pollInterval is the longest wait of a follower now: the PollInterval
// setting, capped at maxDefaultPollInterval while the store behind a
// default poll interval reports that its release notifications do not
// reach this process (asked at each wait: a store learns only after Build
// whether they arrive).
func (f *Flag) pollInterval() time.Duration {
	if f.c.pollNotifier != nil && !f.c.pollNotifier.NotifiesOtherProcesses() {
		return min(f.c.pollInterval, maxDefaultPollInterval)
	}
	return f.c.pollInterval
}

// retryDelay backs off exponentially after failed attempts: from a quarter
// of the timeout, capped at half the renew interval for a holder (so it
// retries several times inside its trust window) and at the poll interval
// for a follower, or at Lease/3 where the default poll interval is Lease
// (notifications only wake followers for releases, not for a database
// that answers again).
func (f *Flag) retryDelay(holding bool) time.Duration {
	limit := f.pollInterval()
	if f.c.pollNotifier != nil {
		limit = min(limit, f.c.lease/3)
	}
	if holding {
		limit = f.c.renewInterval / 2
	}
	wait := f.c.timeout / 4 << min(f.failures-1, 16)
	wait = min(wait, limit)
	return max(wait/2+time.Duration(f.c.randInt64N(int64(wait/2)+1)), time.Millisecond)
}

func (f *Flag) randomJitter() time.Duration {
	if f.c.jitter <= 0 {
		return 0
	}
	return time.Duration(f.c.randInt64N(int64(f.c.jitter) + 1))
}
