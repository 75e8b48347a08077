// Package chaos is the fault-injection suite of the module: it runs real
// OS processes (the program in ./worker) that hold one flag on a shared
// database, injects the faults that break leader elections in practice
// (SIGKILL, SIGSTOP past the lease, a partitioned or slow connection, a
// database restart, a skewed clock), and checks from the processes' own
// records that no two of them ever observed Raised() true at once, and
// that a new leader appears within a bound after each fault.
//
// Every worker samples Raised() about every millisecond and reports each
// run of true observations as an interval of CLOCK_MONOTONIC nanoseconds,
// a clock all processes of the machine share. This package holds that
// clock ([Mono]), the worker's report format ([ParseReport]) and the
// checker ([Overlaps]); the scenarios are its tests:
// go test -run Chaos ./internal/chaos/, and LEADERSHIP_CHAOS_LONG=1 for
// the long mode.
package chaos
