package leadership

import "time"

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
	until := f.term.trustedUntil.Load()
	if until == 0 {
		return time.Time{}, false
	}
	return f.base.Add(time.Duration(until)), true
}
