package leadership

import (
	"context"
	"time"
)

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
// simulate a suspend; nil means the operating system's clocks.
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
// before such a suspend may have expired in the database meanwhile.
func (f *Flag) lowerIfSuspended(ctx context.Context, since time.Duration) (time.Duration, bool) {
	now := f.susp.suspended()
	if now-since <= suspendTolerance {
		return now, false
	}
	f.suspendedLower(ctx, now-since)
	return now, true
}

// checkSuspend lowers the flag at once if the machine was suspended since
// the send that opened the current trust window, and returns the reading
// now, to be kept as the window's if the attempt that follows opens one.
func (f *Flag) checkSuspend(ctx context.Context) time.Duration {
	now, _ := f.lowerIfSuspended(ctx, f.susp.window)
	return now
}
