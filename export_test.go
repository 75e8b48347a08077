package leadership

import "time"

// Hooks for the simulation (sim_*_test.go). They set unexported fields of
// the builder's config, so they affect only the flags built with that
// builder and tests using them may run in parallel.

// RandInt64NForTest replaces the source of jitter and backoff of the
// flags built by b.
func (b *FlagBuilder) RandInt64NForTest(fn func(n int64) int64) *FlagBuilder {
	b.c.randInt64N = fn
	return b
}

// TrustFromReplyForTest turns on, for the flags built by b, the mutant
// that counts the trust window from the reply instead of the send.
func (b *FlagBuilder) TrustFromReplyForTest() *FlagBuilder {
	b.c.newTerm = func(c *config, prev term, version, _, replied int64) term {
		return newTerm(c, prev, version, replied, replied)
	}
	return b
}

// ClocksForTest makes the flags built by b read the clock pair of suspend
// detection (monotonic, and one that also counts suspend) from fn instead
// of the operating system, so a test can suspend a simulated machine.
func (b *FlagBuilder) ClocksForTest(fn func() (mono, boot time.Duration)) *FlagBuilder {
	b.c.clocks = fn
	return b
}

// RenewTicksShiftedForTest moves the renewal ticks of the flags built by
// b later by d, less than their RenewInterval.
func (b *FlagBuilder) RenewTicksShiftedForTest(d time.Duration) *FlagBuilder {
	b.c.tickShift = d
	return b
}

// OSClocksForTest reads the operating system's clock pair as flags do.
var OSClocksForTest = osClocks

// SuspendToleranceForTest is the growth of boot − mono taken for a suspend.
const SuspendToleranceForTest = suspendTolerance
