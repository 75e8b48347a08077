package leadership

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Flag is one process's view of a named leadership flag. At any moment at
// most one Flag among all processes sharing the database reports
// [Flag.Raised] true, provided the assumptions in the package documentation
// hold. A background goroutine acquires and renews the flag; all methods are
// safe for concurrent use. Create a Flag with [NewFlag] and
// [FlagBuilder.Build]; release it with [Flag.Close].
//
// The algorithm behind the methods (the loop, an attempt, the trust rule)
// is in loop.go.
type Flag struct {
	c   config
	m   *metrics
	log *slog.Logger

	// base is the monotonic origin of the instants of the flag, kept as
	// nanoseconds since base so they fit in atomics.
	base time.Time
	// lastAttemptDone is when the loop last finished an attempt.
	lastAttemptDone atomic.Int64
	// ticks places the holder's renewals on the grid it shares with the
	// other flags of a batching store ([RenewalTicks]).
	ticks ticks

	loopCtx    context.Context
	loopCancel context.CancelFunc
	loopDone   chan struct{}
	wake       <-chan struct{} // release notifications; nil without a notifier
	stopNotify func()
	failures   int // consecutive failed attempts; loop goroutine only
	susp       suspendWatch
	events     *dispatcher

	closeOnce sync.Once
	closeErr  error
	closedCh  chan struct{}

	// trusted is a copy of term while its trust window is open, nil while
	// the flag is lowered: what Raised and TrustDeadline read, without mu.
	// It is stored under mu.
	trusted atomic.Pointer[term]

	mu sync.Mutex // guards the fields below
	// term is the term this process holds in the database as far as it
	// knows (zero for none). It outlives a closed trust window: the term
	// can still be renewed if nobody took it.
	term term
	// ann is what has been announced about the term.
	ann announcement
	// holder is who held the flag at the last attempt, as the database
	// reported it.
	holder string
}

func newFlag(c config, m *metrics) *Flag {
	f := &Flag{
		c:        c,
		m:        m,
		log:      c.logger.With(slog.String("flag", c.name), slog.String("process", c.process)),
		base:     time.Now(),
		loopDone: make(chan struct{}),
		closedCh: make(chan struct{}),
		events:   newDispatcher(),
		susp:     suspendWatch{clocks: c.clocks},
		ann:      announcement{ch: make(chan struct{})},
	}
	if b, ok := c.store.(AcquireBatcher); ok {
		f.ticks = b.RenewalTicks().join(f.base, b.MaxAcquireBatch())
	}
	return f
}

// Raised reports whether this process holds the flag and may act as its
// leader now. It costs one atomic load and one read of the monotonic clock.
// It turns false at the end of the trust window even if the background
// goroutine is stalled, so a process frozen past its lease never sees it
// true while another process holds the flag.
func (f *Flag) Raised() bool {
	t := f.trusted.Load()
	return t != nil && f.now() < t.trustedUntil
}

// TrustDeadline returns the instant at which the current trust window ends,
// and true; or the zero Time and false when the flag is lowered. It is the
// instant at which [Flag.Raised] turns false unless a renewal extends the
// window first: (the monotonic clock read just before the winning
// statement was sent) + Lease − SafetyMargin, the same value Raised
// compares against. The database started the term after that send, so no
// other process can acquire the flag before the deadline plus SafetyMargin,
// less what the clock-rate bound in the package documentation allows.
//
// The Time carries a monotonic clock reading, so time.Until and Sub measure
// it on the monotonic clock; its wall-clock part is for display only. The
// deadline only moves later while one term lasts. It lets a supervisor hand
// the window to another process (cmd/leadership passes it to a watchdog
// that kills the command when it ends) or arm its own timer.
func (f *Flag) TrustDeadline() (time.Time, bool) {
	t := f.trusted.Load()
	if t == nil {
		return time.Time{}, false
	}
	return f.base.Add(time.Duration(t.trustedUntil)), true
}

// Name returns the flag's name.
func (f *Flag) Name() string { return f.c.name }

// Process returns the holder name this process uses for the flag.
func (f *Flag) Process() string { return f.c.process }

// Holder returns who held the flag at the last attempt, as the database
// reported it: this process's name while it leads; while it follows, the
// holder of the term that leads, another process's name or this
// process's own (another flag of the process with the same name and
// process name leads); "" when nobody held it.
func (f *Flag) Holder() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holder
}

// Token returns the fencing token of the current term and true while the
// flag is raised, or 0 and false. The token (the row's version) increases
// at every new term (by one, except after a new database incarnation: see
// Fencing token in the package documentation) and never changes
// otherwise, so a resource that records
// the highest token it has seen can refuse writes from a former leader that
// still believes it leads (for example one that was frozen). The flag
// cannot protect resources that do not check the token.
func (f *Flag) Token() (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.leadingLocked() {
		return 0, false
	}
	return f.term.version, true
}

// Term returns the term this process leads, and true while the flag is
// raised (the same condition as [Flag.Token], whose value is the term's
// Version); or a zero Term and false. Fencing a transaction with the flag
// (a store's Fence function) asks it at the moment of the fence, so a
// flag that is no longer raised fails the fence at once, without asking
// the database.
func (f *Flag) Term() (Term, bool) {
	version, ok := f.Token()
	if !ok {
		return Term{}, false
	}
	return Term{Name: f.c.name, Holder: f.c.process, Version: version}, true
}

// Wait blocks until the flag is raised, ctx is done (returning ctx.Err())
// or the flag is closed (returning [ErrClosed]). A nil return means the
// flag was raised an instant ago; check [Flag.Raised] again before each
// piece of work.
func (f *Flag) Wait(ctx context.Context) error {
	for {
		f.mu.Lock()
		ch, live, leading := f.ann.ch, f.ann.live, f.leadingLocked()
		f.mu.Unlock()
		select {
		case <-f.closedCh:
			return ErrClosed
		default:
		}
		if leading {
			return nil
		}
		var settle <-chan time.Time
		if live { // announced but the trust window just ended: the timer lowers it soon
			settle = time.After(time.Millisecond)
		}
		select {
		case <-ch:
		case <-settle:
		case <-ctx.Done():
			return ctx.Err()
		case <-f.closedCh:
			return ErrClosed
		}
	}
}

// LeaderContext returns a context derived from parent that is also
// cancelled when the current term of leadership ends (lost, trust window
// over, vetoed, or Close), with its cancel function, and true; or an
// already cancelled context and false when the flag is not raised. Start a
// leader-only job with it so the job is told to stop. The end of the trust
// window is enforced by a timer, so the cancellation can lag behind
// [Flag.Raised] when the process is starved of CPU; check Raised before
// irreversible steps, or use [Flag.Token] for fencing.
func (f *Flag) LeaderContext(parent context.Context) (context.Context, context.CancelFunc, bool) {
	f.mu.Lock()
	termCtx, ok := f.ann.ctx, f.leadingLocked()
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(parent)
	if !ok {
		cancel()
		return ctx, cancel, false
	}
	stop := context.AfterFunc(termCtx, cancel)
	return ctx, func() { stop(); cancel() }, true
}

// Check reports the health of the flag for liveness probes: [ErrClosed]
// after Close; an error wrapping [ErrRenewalOverdue] when this process
// believes it holds a term whose trust window has ended without a renewal
// (the database is unreachable or renewals fail); an error wrapping
// [ErrLoopStalled] when the background loop has not finished an attempt
// for twice as long as its schedule allows. A follower that cannot reach
// the database is healthy: it is not leading.
func (f *Flag) Check() error {
	select {
	case <-f.closedCh:
		return ErrClosed
	default:
	}
	now := f.now()
	f.mu.Lock()
	t := f.term
	f.mu.Unlock()
	if t.version != 0 && now >= t.trustedUntil {
		return fmt.Errorf("%w: flag %q term %d not renewed for %v past its trust window",
			ErrRenewalOverdue, f.c.name, t.version, time.Duration(now-t.trustedUntil).Round(time.Millisecond))
	}
	limit := 2 * (max(f.c.renewInterval, f.c.pollInterval) + 2*f.c.timeout + f.c.jitter)
	if idle := time.Duration(now - f.lastAttemptDone.Load()); idle > limit {
		return fmt.Errorf("%w: flag %q finished no attempt for %v (limit %v)",
			ErrLoopStalled, f.c.name, idle.Round(time.Millisecond), limit)
	}
	return nil
}

// Close stops the background loop, lowers the flag and, if this process
// holds the flag, releases it so a follower can take over at once. The
// release is bounded by the Timeout setting. Close is idempotent and safe
// to call concurrently; it returns when the loop has exited and the last
// OnLower callback has returned. It returns the release error, if any (the
// flag is lowered regardless, and an unreleased term expires after its
// lease).
//
// With [FlagBuilder.HoldAtLeast], Close lowers the flag at once but keeps
// the term (renewing it) until the hold ends, then releases it; it blocks
// until then.
func (f *Flag) Close() error {
	f.closeOnce.Do(func() {
		f.loopCancel()
		<-f.loopDone
		t := f.end("closed")
		version := t.version
		if until := t.since + int64(f.c.holdAtLeast); version != 0 && f.now() < until {
			version = f.hold(version, until)
		}
		if version != 0 {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(f.loopCtx), f.c.timeout)
			if err := f.release(ctx, version); err != nil {
				f.closeErr = err
			}
			cancel()
		}
		f.shutdown()
	})
	return f.closeErr
}

// shutdown marks the flag closed and frees what it holds besides the row.
func (f *Flag) shutdown() {
	f.ticks.leave()
	if f.stopNotify != nil {
		f.stopNotify()
	}
	close(f.closedCh)
	f.events.close()
	f.m.close()
}

// release gives up the term version; the flag must be lowered already.
func (f *Flag) release(ctx context.Context, version int64) error {
	released, err := f.c.store.Release(ctx, f.c.name, f.c.process, version)
	if err != nil {
		f.m.countError("release")
		f.log.LogAttrs(ctx, slog.LevelWarn, "release failed; the term will expire after its lease",
			slog.Int64("version", version), slog.Any("error", err))
		return fmt.Errorf("leadership: release flag %q: %w", f.c.name, err)
	}
	f.log.LogAttrs(ctx, slog.LevelInfo, "flag released",
		slog.Int64("version", version), slog.Bool("was_held", released))
	return nil
}

// now is the monotonic time since base.
func (f *Flag) now() int64 { return int64(time.Since(f.base)) }

// Term identifies one term of leadership of a flag: the flag's name, the
// holder (the process name of the flag that won it) and the version, the
// fencing token. Two terms of one flag never share a version.
//
// A Term is what the stores' Fence functions check a transaction against:
// the transaction commits only if the flag's row still names this holder
// and this version, and no later term can start before it has committed
// or rolled back. A Term is a [Leader] of itself, so a job can pin all its
// transactions to the term it started in (as a shell job run by
// `leadership run` does with LEADERSHIP_NAME, LEADERSHIP_HOLDER and
// LEADERSHIP_TOKEN); pass the [*Flag] itself to fence with whatever term
// it leads at the moment, and only while it is raised.
type Term struct {
	Name    string
	Holder  string
	Version int64
}

// Term returns t and whether it can name a term at all (a holder and a
// positive version): a Term is a [Leader] of itself.
func (t Term) Term() (Term, bool) {
	return t, t.Name != "" && t.Holder != "" && t.Version > 0
}

// Leader is what a transaction is fenced with: anything that reports the
// term it leads, and false when it leads none. [*Flag] and [Term] are
// Leaders.
type Leader interface {
	Term() (Term, bool)
}

var _ Leader = (*Flag)(nil)
