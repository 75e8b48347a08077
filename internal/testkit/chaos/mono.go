//go:build unix

package chaos

import "golang.org/x/sys/unix"

// Mono reads CLOCK_MONOTONIC in nanoseconds: the clock of the reports,
// which the workers and the test read alike and every process of the
// machine shares (outside a time namespace of its own).
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}
