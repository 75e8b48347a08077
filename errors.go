package leadership

import "errors"

// Errors returned by this package and by stores, to be tested with
// [errors.Is].
var (
	// ErrInvalidArgument marks a setting or request that is missing or out
	// of range; the message names the field to fix.
	ErrInvalidArgument = errors.New("leadership: invalid argument")
	// ErrClosed is returned by methods of a closed [Flag].
	ErrClosed = errors.New("leadership: flag closed")
	// ErrRenewalOverdue is returned by [Flag.Check] when the flag believes
	// it holds a term but its trust window ended without a renewal: the
	// database is unreachable or renewals keep failing.
	ErrRenewalOverdue = errors.New("leadership: renewal overdue")
	// ErrLoopStalled is returned by [Flag.Check] when the background loop
	// has not finished an attempt for much longer than its schedule allows.
	ErrLoopStalled = errors.New("leadership: background loop stalled")
	// ErrNotLeader is returned by the Fence functions of the stores (and
	// their RunFenced helpers) when the flag's row no longer names the
	// caller's term, or the flag is not raised: the transaction must be
	// rolled back, and its writes are not committed.
	ErrNotLeader = errors.New("leadership: not leader")
)
