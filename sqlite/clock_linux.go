package sqlite

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// hostClock is CLOCK_BOOTTIME of the host's initial time namespace: it
// never steps, counts time spent in suspend, and starts again at each boot,
// which the kernel's boot ID names. A process in another time namespace
// (unshare --time) reads CLOCK_BOOTTIME shifted by its namespace's offset,
// which is taken off again, so all processes on the host read one clock.
type hostClock struct{}

var hostBoot = sync.OnceValues(func() (hostBootInfo, error) {
	id, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return hostBootInfo{}, fmt.Errorf("read the boot ID (the store needs /proc on Linux): %w", err)
	}
	off, err := timeNamespaceOffset()
	if err != nil {
		return hostBootInfo{}, err
	}
	return hostBootInfo{id: strings.TrimSpace(string(id)), offset: off}, nil
})

type hostBootInfo struct {
	id     string
	offset time.Duration // CLOCK_BOOTTIME offset of this process's time namespace
}

func (hostClock) bootID() (string, error) {
	b, err := hostBoot()
	if err != nil {
		return "", err
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return "", fmt.Errorf("read CLOCK_BOOTTIME: %w", err)
	}
	return b.id, nil
}

func (hostClock) hostMillis() int64 {
	b, _ := hostBoot() // bootID, called by register, has checked it
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) // bootID has checked it
	return (time.Duration(ts.Nano()) - b.offset).Milliseconds()
}

func (hostClock) wallMillis() int64 { return time.Now().UnixMilli() }

// timeNamespaceOffset returns the CLOCK_BOOTTIME offset of the time
// namespace this process lives in, from /proc/self/timens_offsets; zero on
// a kernel without time namespaces.
func timeNamespaceOffset() (time.Duration, error) {
	// timens_offsets shows the namespace of the process's future children.
	// It is the process's own except between unshare(CLONE_NEWTIME) and
	// the next execve, where the offsets of its own clock cannot be read.
	own, err := os.Readlink("/proc/self/ns/time")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil // no time namespaces: every process reads the host's clock
	}
	if err != nil {
		return 0, fmt.Errorf("read the time namespace: %w", err)
	}
	children, err := os.Readlink("/proc/self/ns/time_for_children")
	if err != nil {
		return 0, fmt.Errorf("read the time namespace: %w", err)
	}
	if own != children {
		return 0, fmt.Errorf("this process called unshare(CLONE_NEWTIME) and has not exec'd since: the offsets of its own clocks cannot be read; open the store in the children, or before the unshare")
	}
	f, err := os.Open("/proc/self/timens_offsets")
	if err != nil {
		return 0, fmt.Errorf("read the time namespace offsets: %w", err)
	}
	defer f.Close()
	return parseTimensOffsets(f)
}

// parseTimensOffsets reads the boottime line of a timens_offsets file
// ("boottime <seconds> <nanoseconds>"); the clock may also be named by its
// number, 7 (CLOCK_BOOTTIME).
func parseTimensOffsets(r io.Reader) (time.Duration, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "boottime" && f[0] != strconv.Itoa(unix.CLOCK_BOOTTIME) {
			continue
		}
		secs, err1 := strconv.ParseInt(f[1], 10, 64)
		nanos, err2 := strconv.ParseInt(f[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, fmt.Errorf("parse timens_offsets line %q: %w", sc.Text(), err)
		}
		return time.Duration(secs)*time.Second + time.Duration(nanos), nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read timens_offsets: %w", err)
	}
	return 0, errors.New("timens_offsets has no boottime line")
}
