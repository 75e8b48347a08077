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
// a clock all processes of the machine share, with the fencing tokens it
// read during the run. This package holds that clock ([Mono]), the
// worker's report format ([ParseReport]) and the checkers ([Overlaps], and
// [SharedTokens] for one token raised by two processes); the scenarios
// are its tests: go test -run Chaos ./internal/chaos/, and
// LEADERSHIP_CHAOS_LONG=1 for the long mode.
//
// # Failover
//
// The failover scenarios (go test -run Failover ./internal/chaos/) make
// the database lose commits it acknowledged while the flag changes hands
// (docs/failover.md): a private PostgreSQL primary fails over to an
// asynchronous standby whose replication the test cut before a takeover,
// or a server running with synchronous_commit=off (MariaDB:
// innodb_flush_log_at_trx_commit=0) crashes before writing a takeover.
// The leader of the lost term is cut off from the database, so it still
// trusts its term while the others reconnect. The checkers must find no
// overlap and no shared token. The same scenarios with the unguarded
// mutant (worker -unguarded: the acquire statements from before the guard,
// kept in ./worker for the record) must find a violation, which shows the
// scenarios can fail. LEADERSHIP_CHAOS_LONG=1 runs
// LEADERSHIP_CHAOS_FAILOVERS rounds (default 30) instead of 3.
package chaos
