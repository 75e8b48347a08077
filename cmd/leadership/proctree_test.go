//go:build linux

package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBothSweepsFindTheTree: a sweep through the children files and a
// sweep of all of /proc (for kernels without those files) both find a
// child of this process and its grandchild, with their parents.
func TestBothSweepsFindTheTree(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	sh := cmd.Process.Pid
	var sleep int
	waitFor(t, 10*time.Second, "sh starts sleep", func() bool {
		data, _ := os.ReadFile("/proc/" + strconv.Itoa(sh) + "/task/" + strconv.Itoa(sh) + "/children")
		sleep, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		return sleep != 0
	})
	for name, sweep := range map[string]func(*sweeper) error{
		"children files": func(s *sweeper) error { s.walk(); return nil },
		"all of /proc":   (*sweeper).all,
	} {
		parents := map[int]int{}
		s := &sweeper{tree: map[int]bool{os.Getpid(): true}, found: func(p proc, fd int) {
			parents[p.pid] = p.ppid
			closeFD(fd)
		}}
		for s.more = true; s.more; {
			s.more = false
			if err := sweep(s); err != nil {
				t.Fatal(err)
			}
		}
		if parents[sh] != os.Getpid() || parents[sleep] != sh {
			t.Errorf("%s: found %v, want sh %d (parent %d) and sleep %d (parent sh)", name, parents, sh, os.Getpid(), sleep)
		}
	}
}
