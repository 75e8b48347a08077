//go:build linux

package main

import (
	"math"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// monoNow reads CLOCK_MONOTONIC, the clock Go's monotonic readings come
// from on Linux. It is one clock for every process of the machine (in one
// time namespace), so an instant read in one process means the same in
// another.
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for this clock
	return ts.Nano()
}

// monoOf converts t, which must carry a monotonic reading, to CLOCK_MONOTONIC
// nanoseconds, never later than t. Go's monotonic readings are
// CLOCK_MONOTONIC less a constant of the process, which monoCalibration
// measures once.
func monoOf(t time.Time) int64 {
	ref, offset := monoCalibration()
	return offset + int64(t.Sub(ref))
}

// monoCalibration returns an instant and CLOCK_MONOTONIC at that instant,
// never later than the truth: of a few clock reads on either side of
// time.Now, it keeps the pair read closest together, and the read before.
var monoCalibration = sync.OnceValues(func() (time.Time, int64) {
	ref := time.Now()
	offset, spread := int64(0), int64(math.MaxInt64)
	for range 8 {
		before := monoNow()
		now := time.Now()
		after := monoNow()
		if after-before < spread {
			spread, offset = after-before, before-int64(now.Sub(ref))
		}
	}
	return ref, offset
})
