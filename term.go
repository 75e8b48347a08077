package leadership

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// term is the term of leadership this process holds as far as it knows,
// with its trust window and what has been announced about it. Every
// transition of the term is a method of [Flag] in this file: acquired,
// untrusted, suspendedLower, lost, veto and end (from the loop and Close),
// and raise, lower, extend and expire beneath them.
//
// Two states must not be confused. The flag is trusted while the trust
// window is open (trustedUntil, what [Flag.Raised] reads). It is announced
// raised from raiseLocked to lowerLocked: OnRaise has been started, the
// metrics and waiters have been told, and the term context is live. A
// trust window can end before the timer announces the lower, so the
// public methods that act on the term ask for both ([term.leading]).
type term struct {
	// trustedUntil is the end of the trust window in [Flag.now] units, or
	// 0 when the flag is lowered. It is the only field read without
	// Flag.mu: Raised is true while now < trustedUntil.
	trustedUntil atomic.Int64

	// The fields below are guarded by Flag.mu.

	// version is the term this process holds in the database as far as
	// it knows, 0 for none. It outlives a closed trust window: the term
	// can still be renewed if nobody took it.
	version int64
	// deadline is the end of the trust window of the last renewal of
	// version, kept after lowering for Check.
	deadline int64
	// since is when this process learned it acquired version (the reply
	// of the acquire): the start of the hold of [FlagBuilder.HoldAtLeast].
	since int64
	// announced is true from raiseLocked to lowerLocked.
	announced bool
	// ctx is cancelled when the announced term ends (LeaderContext,
	// OnRaise).
	ctx    context.Context
	cancel context.CancelFunc
	// announcedCh is closed while announced is true (Wait).
	announcedCh chan struct{}
	// timer lowers the flag when the trust window ends; nil until the
	// first window.
	timer *time.Timer
}

// leading reports whether the term is announced raised and its trust
// window is still open at now. Flag.mu is held.
func (t *term) leading(now int64) bool {
	return t.announced && now < t.trustedUntil.Load()
}

// acquired handles a successful acquire or renewal sent at sent.
func (f *Flag) acquired(ctx context.Context, res Result, sent int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holder = res.Holder
	if f.term.version != 0 && f.term.version != res.Version {
		// Our former term ended (another process held the flag in
		// between) and this is a new one.
		f.lowerLocked("term replaced by a new term")
	}
	renewed := f.term.version == res.Version
	f.term.version = res.Version
	if !renewed {
		f.term.since = f.now()
	}
	if f.c.trustFromReply { // a deliberately wrong rule, for the simulation's mutant test only
		sent = f.now()
	}
	deadline := sent + int64(f.c.lease-f.c.safetyMargin)
	if f.now() >= deadline {
		// The reply came too late to trust (stall, slow database): stay
		// lowered; the next attempt renews the term if nobody took it.
		f.lowerLocked("reply arrived after the trust window")
		f.log.LogAttrs(ctx, slog.LevelWarn, "acquired too late to trust; staying lowered",
			slog.Int64("version", res.Version))
		return
	}
	f.extendLocked(deadline)
	if renewed && f.term.announced {
		f.log.LogAttrs(ctx, slog.LevelDebug, "renewed", slog.Int64("version", res.Version),
			slog.Time("expires_at", res.ExpiresAt))
	}
	f.raiseLocked()
}

// untrusted handles an acquire or renewal whose statement may have taken
// effect before a suspend of the machine and whose reply came after it
// (suspend.go): the term is this process's in the database, but its window
// may be over there already, so the flag stays lowered and the next
// attempt renews the term from a new send.
func (f *Flag) untrusted(res Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holder = res.Holder
	f.lowerLocked("machine suspended while the attempt was in flight")
	f.term.version = res.Version
}

// suspendedLower lowers the flag at once because the machine was suspended
// for slept during its trust window (suspend.go); the term is kept, to be
// renewed from a new send if nobody took it.
func (f *Flag) suspendedLower(ctx context.Context, slept time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.term.trustedUntil.Load() == 0 {
		return
	}
	f.lowerLocked("machine suspended")
	f.log.LogAttrs(ctx, slog.LevelWarn, "machine was suspended during the trust window; lowered at once",
		slog.Int64("version", f.term.version), slog.Duration("suspended", slept))
}

// lost handles an attempt that found the flag held by another term.
func (f *Flag) lost(ctx context.Context, res Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if res.Holder != f.holder {
		f.log.LogAttrs(ctx, slog.LevelDebug, "flag held by another process",
			slog.String("holder", res.Holder), slog.Int64("version", res.Version), slog.Time("expires_at", res.ExpiresAt))
	}
	f.holder = res.Holder
	if f.term.version != 0 {
		f.term.version = 0
		f.lowerLocked("lost the term to another process or an eviction")
	}
}

// veto handles a precheck that refused leadership: it lowers the flag
// and releases the term.
func (f *Flag) veto(ctx context.Context, reason error) {
	version := f.end("vetoed by precheck")
	f.log.LogAttrs(ctx, slog.LevelDebug, "precheck vetoed leadership", slog.Any("reason", reason))
	if version != 0 {
		rctx, cancel := context.WithTimeout(ctx, f.c.timeout)
		_ = f.release(rctx, version) // logged; the term expires if this fails
		cancel()
	}
}

// end lowers the flag for reason and forgets the term, returning its
// version (0 for none) for the caller to release.
func (f *Flag) end(reason string) (version int64) {
	version, _ = f.endSince(reason)
	return version
}

// endSince is end that also returns when the term was acquired.
func (f *Flag) endSince(reason string) (version, since int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	version, since = f.term.version, f.term.since
	f.lowerLocked(reason)
	f.term.version = 0
	return version, since
}

// raiseLocked announces the flag raised. f.mu is held and the trust window
// already open.
func (f *Flag) raiseLocked() {
	t := &f.term
	if t.announced {
		return
	}
	t.announced = true
	t.ctx, t.cancel = context.WithCancel(context.WithoutCancel(f.loopCtx))
	close(t.announcedCh)
	f.m.setState(true, t.version)
	f.log.LogAttrs(f.loopCtx, slog.LevelInfo, "flag raised", slog.Int64("version", t.version))
	if f.c.onRaise != nil {
		go f.c.onRaise(t.ctx)
	}
}

// lowerLocked closes the trust window and, if the flag was announced
// raised, announces it lowered. f.mu is held.
func (f *Flag) lowerLocked(reason string) {
	t := &f.term
	t.trustedUntil.Store(0)
	if t.timer != nil {
		t.timer.Stop()
	}
	if !t.announced {
		return
	}
	t.announced = false
	t.cancel()
	t.announcedCh = make(chan struct{})
	f.m.setState(false, 0)
	f.log.LogAttrs(f.loopCtx, slog.LevelInfo, "flag lowered", slog.String("reason", reason), slog.Int64("version", t.version))
	if f.c.onLower != nil {
		f.events.post(f.c.onLower)
	}
}

// extendLocked sets the trust window of the held term to end at deadline
// and arms the timer that lowers the flag then. f.mu is held.
func (f *Flag) extendLocked(deadline int64) {
	t := &f.term
	t.deadline = deadline
	t.trustedUntil.Store(deadline)
	wait := time.Duration(deadline - f.now())
	if t.timer == nil {
		t.timer = time.AfterFunc(wait, f.expire)
	} else {
		t.timer.Reset(wait)
	}
}

// expire runs when a trust window ends: it lowers the flag unless a renewal
// extended the window meanwhile.
func (f *Flag) expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	deadline := f.term.trustedUntil.Load()
	if deadline == 0 {
		return
	}
	if wait := time.Duration(deadline - f.now()); wait > 0 {
		f.term.timer.Reset(wait)
		return
	}
	f.lowerLocked("trust window ended without renewal")
}
