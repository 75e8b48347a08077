package leadership

import (
	"time"

	"golang.org/x/sys/unix"
)

// osClocks reads CLOCK_MONOTONIC, CLOCK_BOOTTIME and CLOCK_MONOTONIC again
// and returns the middle of the two monotonic reads with the boot read. Of
// up to three tries it keeps the one whose monotonic reads are closest, so
// that a preemption between the reads does not pass for a suspend. Without
// CLOCK_BOOTTIME (Linux before 2.6.39) it returns zeros: no suspend is
// ever seen.
func osClocks() (mono, boot time.Duration) {
	width := time.Duration(-1)
	for range 3 {
		m1, err1 := clockRead(unix.CLOCK_MONOTONIC)
		b, err2 := clockRead(unix.CLOCK_BOOTTIME)
		m2, err3 := clockRead(unix.CLOCK_MONOTONIC)
		if err1 != nil || err2 != nil || err3 != nil {
			return 0, 0
		}
		if w := m2 - m1; width < 0 || w < width {
			width, mono, boot = w, m1+w/2, b
		}
		if width < 100*time.Microsecond {
			break
		}
	}
	return mono, boot
}

func clockRead(id int32) (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}
