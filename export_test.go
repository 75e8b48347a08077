package leadership

import "time"

// Hooks for the simulation (sim_test.go). They change package variables
// read by every flag, so call them only while no flag runs, and restore.

// SetRandInt64NForTest replaces the source of jitter and backoff.
func SetRandInt64NForTest(fn func(n int64) int64) (restore func()) {
	old := randInt64N
	randInt64N = fn
	return func() { randInt64N = old }
}

// SetTrustFromReplyForTest turns on the mutant that counts the trust
// window from the reply instead of the send.
func SetTrustFromReplyForTest() (restore func()) {
	trustFromReply = true
	return func() { trustFromReply = false }
}

// SetClocksForTest makes the flags b builds read the clock pair of suspend
// detection from fn (monotonic, and one that also counts suspend) instead
// of the operating system.
func SetClocksForTest(b *FlagBuilder, fn func() (mono, boot time.Duration)) {
	b.clocks = fn
}

// OSClocksForTest reads the operating system's clock pair as flags do.
var OSClocksForTest = osClocks

// SuspendToleranceForTest is the growth of boot − mono taken for a suspend.
const SuspendToleranceForTest = suspendTolerance
