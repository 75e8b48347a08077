package leadership

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
