package leadership

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// The algorithm of a flag. One goroutine (run) makes attempts (attempt),
// each one conditional statement of the store. An attempt that acquired or
// renewed the flag gives a term (newTerm, the trust rule), which the flag
// trusts until its trust window ends; the flag is announced raised while
// it trusts a term (raiseLocked, lowerLocked). Close (flag.go) ends it,
// after a hold when HoldAtLeast asks for one. Instants are in [Flag.now]
// units.

// start makes the first attempt with the caller's context and starts the
// loop. On error nothing is left running.
func (f *Flag) start(ctx context.Context) error {
	f.loopCtx, f.loopCancel = context.WithCancel(context.WithoutCancel(ctx))
	n, notifies := f.c.store.(ReleaseNotifier)
	if notifies {
		f.wake, f.stopNotify = n.NotifyReleases(f.c.name)
	}
	f.log.LogAttrs(ctx, slog.LevelDebug, "flag starting",
		slog.Duration("lease", f.c.lease), slog.Duration("renew_interval", f.c.renewInterval),
		slog.Duration("poll_interval", f.c.pollInterval), slog.Duration("timeout", f.c.timeout),
		slog.Duration("safety_margin", f.c.safetyMargin), slog.Duration("jitter", f.c.jitter),
		slog.Bool("release_notifications", notifies))
	first, err := f.attempt(ctx)
	if err != nil {
		f.loopCancel()
		close(f.loopDone)
		f.shutdown()
		return fmt.Errorf("leadership: first attempt on flag %q: %w", f.c.name, err)
	}
	go f.run(first)
	return nil
}

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
		delay, _ = f.attempt(f.loopCtx)
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

// attempt makes one attempt (precheck, then acquire or renew) and returns
// how long to wait before the next one, and the database error if the
// attempt failed.
func (f *Flag) attempt(ctx context.Context) (time.Duration, error) {
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
	replied := f.now()
	seconds := time.Duration(replied - sent).Seconds()

	switch {
	case err != nil:
		f.m.observeAttempt("error", seconds)
		f.m.countError("acquire")
		f.failures++
		if ctx.Err() == nil {
			f.log.LogAttrs(ctx, slog.LevelWarn, "attempt failed",
				slog.Int64("version", version), slog.Int("failures", f.failures), slog.Any("error", err))
		}
		return f.retryDelay(version != 0), err
	case !res.Acquired:
		f.failures = 0
		f.m.observeAttempt("held_by_other", seconds)
		f.lost(ctx, res)
		return f.followDelay(res), nil
	case suspended:
		f.failures = 1 // renew from a new send soon, with backoff if it recurs
		f.m.observeAttempt("acquired", seconds)
		f.untrusted(res, sent, replied)
		return f.retryDelay(true), nil
	default:
		f.failures = 0
		f.m.observeAttempt("acquired", seconds)
		f.acquired(ctx, res, sent, replied)
		f.susp.window = atSend
		return f.renewDelay(), nil
	}
}

// term is a term of leadership as this process knows it: a value, built
// by the trust rule (newTerm) from the reply that acquired or renewed it,
// and replaced whole at the next.
type term struct {
	// version is the term's version in the database, its fencing token;
	// 0 for no term.
	version int64
	// since is when the reply that acquired version arrived: the start of
	// the hold of [FlagBuilder.HoldAtLeast]. Renewals keep it.
	since int64
	// trustedUntil is the end of the trust window of the last reply:
	// Raised is true before it while the term is trusted.
	trustedUntil int64
}

// newTerm is the trust rule: the term that a reply at replied gives to the
// statement sent at sent, which acquired or renewed version after the
// term prev, is trusted until sent + Lease − SafetyMargin. It counts from
// the send, the last instant known to precede the statement's effect
// (the package documentation's Safety section has the argument). A test
// hook replaces it (config.newTerm) to show that the simulation catches a
// wrong rule.
func newTerm(c *config, prev term, version, sent, replied int64) term {
	t := term{version: version, since: replied, trustedUntil: sent + int64(c.lease-c.safetyMargin)}
	if version == prev.version {
		t.since = prev.since
	}
	return t
}

// acquired handles an acquire or renewal sent at sent whose reply came at
// replied: the flag trusts the term it gives, unless its trust window is
// already over.
func (f *Flag) acquired(ctx context.Context, res Result, sent, replied int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holder = res.Holder
	if f.term.version != 0 && f.term.version != res.Version {
		// Our former term ended (another process held the flag in
		// between) and this is a new one.
		f.lowerLocked("term replaced by a new term")
	}
	renewed := f.term.version == res.Version
	f.term = f.c.newTerm(&f.c, f.term, res.Version, sent, replied) // newTerm: the trust rule
	if f.now() >= f.term.trustedUntil {
		// The reply came too late to trust (stall, slow database): stay
		// lowered; the next attempt renews the term if nobody took it.
		f.lowerLocked("reply arrived after the trust window")
		f.log.LogAttrs(ctx, slog.LevelWarn, "acquired too late to trust; staying lowered",
			slog.Int64("version", res.Version))
		return
	}
	f.trustLocked()
	if renewed && f.ann.live {
		f.log.LogAttrs(ctx, slog.LevelDebug, "renewed", slog.Int64("version", res.Version),
			slog.Time("expires_at", res.ExpiresAt))
	}
	f.raiseLocked()
}

// untrusted handles an acquire or renewal whose statement may have taken
// effect before a suspend of the machine and whose reply came after it:
// the term is this process's in the database, but its window may be over
// there already, so the flag stays lowered and the next attempt renews
// the term from a new send.
func (f *Flag) untrusted(res Result, sent, replied int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holder = res.Holder
	f.lowerLocked("machine suspended while the attempt was in flight")
	f.term = f.c.newTerm(&f.c, f.term, res.Version, sent, replied)
}

// lost handles an attempt that found the flag held by another term: of
// another process, or of another flag of this process under the same
// holder name (two flags of one name built without Process), whose
// holder is then this process's own name. A follower logs at Info once
// per change of the holder, so an operator sees who leads without Debug.
func (f *Flag) lost(ctx context.Context, res Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if res.Holder != f.holder {
		level := slog.LevelInfo
		if res.Holder == "" { // nobody holds it (a quarantine, an unreadable row)
			level = slog.LevelDebug
		}
		f.log.LogAttrs(ctx, level, "flag held by another term",
			slog.String("holder", res.Holder), slog.Int64("version", res.Version), slog.Time("expires_at", res.ExpiresAt))
	}
	f.holder = res.Holder
	if f.term.version != 0 {
		f.term = term{}
		f.lowerLocked("another term holds the flag, or it was evicted")
	}
}

// veto handles a precheck that refused leadership: it lowers the flag
// and releases the term.
func (f *Flag) veto(ctx context.Context, reason error) {
	t := f.end("vetoed by precheck")
	f.log.LogAttrs(ctx, slog.LevelDebug, "precheck vetoed leadership", slog.Any("reason", reason))
	if t.version != 0 {
		rctx, cancel := context.WithTimeout(ctx, f.c.timeout)
		_ = f.release(rctx, t.version) // logged; the term expires if this fails
		cancel()
	}
}

// end lowers the flag for reason and forgets the term, returning it (the
// zero term for none) for the caller to release.
func (f *Flag) end(reason string) term {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.term
	f.lowerLocked(reason)
	f.term = term{}
	return t
}

// announcement is what has been announced about the term: from raiseLocked
// to lowerLocked, OnRaise has been started, the metrics and waiters have
// been told, and ctx is live. A trust window can end before the timer
// announces the lower, so the methods that act on the term ask for both
// (leadingLocked). Guarded by Flag.mu.
type announcement struct {
	live bool
	// ctx is cancelled when the announced term ends (LeaderContext,
	// OnRaise).
	ctx    context.Context
	cancel context.CancelFunc
	// ch is closed while live (Wait).
	ch chan struct{}
	// timer lowers the flag when the trust window ends; nil until the
	// first window.
	timer *time.Timer
}

// leadingLocked reports whether the flag is announced raised and its
// trust window still open. f.mu is held.
func (f *Flag) leadingLocked() bool {
	t := f.trusted.Load()
	return f.ann.live && t != nil && f.now() < t.trustedUntil
}

// trustLocked opens (or extends) the trust window of f.term and arms the
// timer that lowers the flag when it ends. f.mu is held.
func (f *Flag) trustLocked() {
	t := f.term
	f.trusted.Store(&t)
	wait := time.Duration(t.trustedUntil - f.now())
	if f.ann.timer == nil {
		f.ann.timer = time.AfterFunc(wait, f.expire)
	} else {
		f.ann.timer.Reset(wait)
	}
}

// expire runs when a trust window ends: it lowers the flag unless a renewal
// extended the window meanwhile.
func (f *Flag) expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.trusted.Load()
	if t == nil {
		return
	}
	if wait := time.Duration(t.trustedUntil - f.now()); wait > 0 {
		f.ann.timer.Reset(wait)
		return
	}
	f.lowerLocked("trust window ended without renewal")
}

// raiseLocked announces the flag raised. f.mu is held and the trust window
// already open.
func (f *Flag) raiseLocked() {
	a := &f.ann
	if a.live {
		return
	}
	a.live = true
	a.ctx, a.cancel = context.WithCancel(context.WithoutCancel(f.loopCtx))
	close(a.ch)
	f.m.setState(true, f.term.version)
	f.log.LogAttrs(f.loopCtx, slog.LevelInfo, "flag raised", slog.Int64("version", f.term.version))
	if f.c.onRaise != nil {
		go f.c.onRaise(a.ctx)
	}
}

// lowerLocked closes the trust window and, if the flag was announced
// raised, announces it lowered. f.mu is held.
func (f *Flag) lowerLocked(reason string) {
	a := &f.ann
	f.trusted.Store(nil)
	if a.timer != nil {
		a.timer.Stop()
	}
	if !a.live {
		return
	}
	a.live = false
	a.cancel()
	a.ch = make(chan struct{})
	f.m.setState(false, 0)
	f.log.LogAttrs(f.loopCtx, slog.LevelInfo, "flag lowered", slog.String("reason", reason), slog.Int64("version", f.term.version))
	if f.c.onLower != nil {
		f.events.post(f.c.onLower)
	}
}

// renewDelay is the wait after a successful attempt of the holder: until
// its next renewal tick on a batching store ([RenewalTicks]), else
// RenewInterval.
func (f *Flag) renewDelay() time.Duration {
	t, r := f.ticks, f.c.renewInterval
	if t.grid == nil {
		return r
	}
	shift := int64(t.phase*float64(r)) + int64(f.c.tickShift)
	return untilTick(f.now(), t.offset-shift, r)
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

// hold keeps the term version in the database, lowered, until the instant
// until, for [FlagBuilder.HoldAtLeast]: it renews the term at once and then
// every RenewInterval, retrying failed renewals with the loop's backoff.
// It returns the version to release, or 0 when another process took the
// flag meanwhile (the term had expired unrenewed) and there is nothing
// left to release. The loop has exited, so hold may use its fields.
func (f *Flag) hold(version, until int64) int64 {
	ctx := context.WithoutCancel(f.loopCtx)
	f.log.LogAttrs(ctx, slog.LevelInfo, "holding the flag after Close",
		slog.Int64("version", version), slog.Duration("for", time.Duration(until-f.now()).Round(time.Millisecond)))
	f.failures = 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		<-timer.C
		if f.now() >= until {
			return version
		}
		actx, cancel := context.WithTimeout(ctx, f.c.timeout)
		res, err := f.c.store.Acquire(actx, Request{Name: f.c.name, Holder: f.c.process, Version: version, Lease: f.c.lease})
		cancel()
		wait := f.c.renewInterval
		switch {
		case err != nil:
			f.m.countError("acquire")
			f.failures++
			f.log.LogAttrs(ctx, slog.LevelWarn, "renewal during the hold failed",
				slog.Int64("version", version), slog.Int("failures", f.failures), slog.Any("error", err))
			wait = f.retryDelay(true)
		case !res.Acquired:
			f.log.LogAttrs(ctx, slog.LevelWarn, "flag taken by another process during the hold",
				slog.Int64("version", version), slog.String("holder", res.Holder))
			return 0
		default:
			f.failures = 0
			version = res.Version // a new term if ours expired unrenewed and nobody took it
		}
		timer.Reset(min(wait, time.Duration(until-f.now())))
	}
}

// Suspend detection. Raised compares Go's monotonic clock (CLOCK_MONOTONIC
// on Linux) with the end of the trust window, and that clock stops while
// the machine is suspended: a holder resumed after its lease would trust
// its term for as long as it was suspended. CLOCK_BOOTTIME is the same
// clock plus the time spent suspended, so boot − mono grows by exactly
// that time (NTP slews both alike). The loop reads it just before each
// send and compares at each step of an attempt; Raised itself stays one
// clock read and one atomic load.

// suspendTolerance is the growth of boot − mono taken for a suspend. It is
// far above the error of a reading (see osClocks) and far below the
// default safety margin, which absorbs a shorter suspend like any other
// clock difference.
const suspendTolerance = 10 * time.Millisecond

// clockPair reads, as close together as it can, the monotonic clock that
// Raised reads and a clock that also counts the time the machine was
// suspended. A flag takes its own (config.clocks) so that tests can
// simulate a suspend; nil means the operating system's clocks (osClocks,
// suspend_linux.go).
type clockPair func() (mono, boot time.Duration)

// suspendWatch is the loop's state for suspend detection; only the loop
// (and start, before it) use it.
type suspendWatch struct {
	clocks clockPair
	// window is boot − mono read just before the send that opened the
	// current trust window.
	window time.Duration
}

// suspended returns boot − mono now: the time the machine has spent
// suspended, plus a constant.
func (w *suspendWatch) suspended() time.Duration {
	if w.clocks == nil {
		w.clocks = osClocks
	}
	mono, boot := w.clocks()
	return boot - mono
}

// lowerIfSuspended lowers the flag at once if the machine was suspended
// after the reading since (by more than suspendTolerance) and returns the
// reading now and whether it was. A term whose trust window was opened
// before such a suspend may have expired in the database meanwhile; it is
// kept, to be renewed from a new send if nobody took it.
func (f *Flag) lowerIfSuspended(ctx context.Context, since time.Duration) (time.Duration, bool) {
	now := f.susp.suspended()
	if now-since <= suspendTolerance {
		return now, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.trusted.Load() != nil {
		f.lowerLocked("machine suspended")
		f.log.LogAttrs(ctx, slog.LevelWarn, "machine was suspended during the trust window; lowered at once",
			slog.Int64("version", f.term.version), slog.Duration("suspended", now-since))
	}
	return now, true
}

// checkSuspend lowers the flag at once if the machine was suspended since
// the send that opened the current trust window, and returns the reading
// now, to be kept as the window's if the attempt that follows opens one.
func (f *Flag) checkSuspend(ctx context.Context) time.Duration {
	now, _ := f.lowerIfSuspended(ctx, f.susp.window)
	return now
}

// dispatcher runs callbacks (OnLower) one at a time, in the order posted,
// on one goroutine, so that a slow callback never blocks the flag's loop.
type dispatcher struct {
	mu      sync.Mutex
	queue   []func()
	running bool
	closed  bool
	idle    *sync.Cond
}

func newDispatcher() *dispatcher {
	d := &dispatcher{}
	d.idle = sync.NewCond(&d.mu)
	return d
}

// post queues fn; it is dropped after close.
func (d *dispatcher) post(fn func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.queue = append(d.queue, fn)
	if !d.running {
		d.running = true
		go d.drain()
	}
}

func (d *dispatcher) drain() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.queue) > 0 {
		fn := d.queue[0]
		d.queue = d.queue[1:]
		d.mu.Unlock()
		fn()
		d.mu.Lock()
	}
	d.running = false
	d.idle.Broadcast()
}

// close waits until every queued callback has returned and refuses new
// ones.
func (d *dispatcher) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for d.running {
		d.idle.Wait()
	}
}
