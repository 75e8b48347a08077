//go:build !linux

package main

import (
	"fmt"
	"io"
)

// `leadership run` needs Linux: what keeps a command from running on two
// hosts at once is a watchdog that finds and kills every process the
// command started, through PR_SET_CHILD_SUBREAPER, pidfds, /proc and
// cgroup v2, none of which these systems have. A weaker run (the
// command's process group only) would let a process that calls setsid
// outlive leadership, silently; it refuses instead. status, release,
// migrate and quarantine work on every system.
const watchdogName = "__watchdog"

func runCommand(_ []string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "leadership run: needs Linux (the watchdog that stops the command's whole process tree uses Linux-only calls); status, release, migrate and quarantine work here")
	return exitUsage
}

func watchdogCommand(args []string, stderr io.Writer) int { return runCommand(args, stderr) }
