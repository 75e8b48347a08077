// Package leadership gives many processes that share one SQL database a
// flag per name that at most one of them sees raised at any moment: a
// leader election for cron-like jobs, built on optimistic locking of one
// versioned row per flag.
//
//	flag, err := leadership.NewFlag().Store(store).Name("nightly-report").Build(ctx)
//	if err != nil { ... }
//	defer flag.Close()
//	...
//	if flag.Raised() {
//		runNightlyReport()
//	}
//
// A background goroutine per flag acquires the row, renews it at most
// RenewInterval apart while it holds it, and otherwise schedules its next
// attempt for the holder's expiry. [Flag.Raised] is one atomic load and
// one read of the monotonic clock. The argument for each guarantee below
// is in docs/design.md of the repository; the failover guard's in
// docs/failover.md.
//
// # Stores
//
// The database is reached through a [Store]: package sqlite (embedded, the
// default), postgres (pgx v5) and mysql (MySQL and MariaDB) implement it;
// memstore is an in-memory store for tests, and package storetest is the
// conformance suite every store passes. Stores apply their schema (package
// migrations) at [FlagBuilder.Build] unless [FlagBuilder.Migrate] is false.
// A store may also implement [ReleaseNotifier], [ProcessNotifier],
// [AcquireBatcher], [SchemaVersioner] and [Quarantiner].
//
// # Guarantees
//
// Under the assumptions below:
//
//   - At most one flag raised. A process trusts a term until (its monotonic
//     clock just before the successful attempt was sent) + Lease −
//     SafetyMargin, and [Flag.Raised] compares the clock with that instant
//     itself, so it turns false on time even when the background goroutine
//     is stalled (a GC pause, SIGSTOP, a hung database call). A reply that
//     arrives after the window it would open is not trusted. No two
//     processes' windows for one flag overlap.
//   - Database clock only. Whether a term has expired is decided by the
//     database, with its own clock, inside the statement that acquires or
//     renews. The clocks of the processes are never compared.
//   - One round trip per attempt. Acquire-or-renew is one conditional
//     statement that decides and writes (on postgres with
//     postgres.ShouldPing in the pool's config); the attempts of flags of
//     one Store that are due together share a batch.
//   - Fencing token. The row's version ([Flag.Token]) increases at each new
//     term and never changes otherwise: renewals and releases keep it, rows
//     are never deleted. It increases by exactly one, except for the first
//     new terms after the failover guard noticed a new database
//     incarnation: those get at least the database clock in microseconds
//     since 1970. A row at math.MaxInt64 starts no new term (the attempt
//     fails naming the flag).
//   - Fenced transactions. On the flag's own database, a transaction fenced
//     with the flag or a [Term] (the Fence and RunFenced functions of
//     packages postgres, mysql and sqlite) commits only while the row names
//     that term, failing with [ErrNotLeader] otherwise, and no later term
//     starts before it has ended.
//   - Leases are stored, not assumed: processes configured with different
//     leases never overlap. Renewal is scoped to the term (holder and
//     version): two flags with one process name never both raise, and a
//     former holder cannot renew a successor's term.
//   - Failover after about one lease. Followers attempt at the holder's
//     expiry by the database clock (plus Jitter), and at least every
//     PollInterval: Lease/3, at most 2 s, unless the store reports before
//     each wait that its release notifications reach every process
//     ([ProcessNotifier]); then Lease.
//   - Prompt handover. [Flag.Close] lowers the flag, then releases the row,
//     which expires at once; followers notice at their next poll, or at
//     once when the store notifies releases ([ReleaseNotifier]).
//     Notifications bring an attempt forward at most once per Lease/20.
//     With [FlagBuilder.HoldAtLeast], Close lowers at once but keeps the
//     term, renewed, until the hold has passed since it was acquired.
//   - Errors lower nothing early. A failed renewal is retried with backoff;
//     the flag stays raised until the end of its trust window, and is
//     raised again when the database answers and the term is still (or
//     again) this process's.
//
// # Assumptions
//
//   - Clock rates agree within the safety margin: while a process's
//     monotonic clock advances by Lease − SafetyMargin, the database clock
//     advances by at most Lease (11% faster with the default margin). A
//     backward jump of the database clock only delays failover; a forward
//     jump by more than the margin gives two leaders. postgres and mysql
//     read the server's wall clock: let NTP slew it, never step it. sqlite
//     reads CLOCK_BOOTTIME on Linux, which does not step, else the wall
//     clock. Wall-clock jumps of a flag's own process do not matter.
//   - No unnoticed suspend. The monotonic clock stops while a machine is
//     suspended. On Linux the flag compares it with CLOCK_BOOTTIME at each
//     attempt and reply and lowers at once when they differ by more than
//     10 ms; after a resume past the trust window, Raised can still be true
//     while another process leads, for at most max(RenewInterval, Timeout).
//     Not detected: suspend on other systems, and a VM pause that stops the
//     guest's clocks.
//   - A statement takes effect between its send and its reply, and a reply
//     is trusted only for a committed write.
//   - The database never loses a commit it acknowledged, or, on postgres
//     and mysql, the acquire statement notices the new server incarnation
//     that may have lost some (crash recovery with relaxed durability, a
//     promoted asynchronous replica): it then starts no new term for one
//     longest lease and raises the version floor. That needs no split
//     brain, a promoted server's clock not behind the old one's by more
//     than the failover took, and the longest lease recorded before the
//     lost commits. For a failover the store cannot see, an operator runs
//     leadership quarantine ([Quarantiner]).
//   - The store obeys the [Store] contract; package storetest checks it.
//
// # Non-guarantees
//
//   - The flag cannot stop work that is already running. When a term ends,
//     Raised turns false and the context from [Flag.LeaderContext] (and the
//     one given to OnRaise) is cancelled, but a job must check them, or
//     fence its writes: pass [Flag.Token] to resources that refuse lower
//     tokens, or use a fenced transaction on the flag's database.
//   - One run per period is not promised to schedulers that count periods
//     from each process's start; see packages gocronflag and cronflag.
//   - A Store with a different contract voids the guarantees.
//
// # Metrics
//
// With [FlagBuilder.MetricsRegisterer], a flag registers on the given
// registry only: [MetricState] (gauge, 1 while raised), [MetricTransitions],
// [MetricAttemptDuration], [MetricErrors], and for alerting rules
// [MetricLease], [MetricRenewInterval], [MetricToken] and [MetricHealthy]
// ([Flag.Check] at scrape time), each labelled with the flag's name and the
// process. Several flags share the collectors of one registry; a closed
// flag deletes its series. monitoring/prometheus/rules.yml holds alerting
// rules over them.
//
// # Logging
//
// Logs go to the [log/slog] logger given with [FlagBuilder.Logger] (none by
// default) with the keys "flag", "process", "holder" and "version": Debug
// for the effective settings at Build ("flag starting": lease, intervals,
// timeout, margin, jitter) and for routine renewals, Info for raise, lower
// and release and, on a follower, once per change of the holder ("flag
// held by another term" with the new "holder", which is this process's
// own name when another flag of the process with the same name leads),
// Warn for failed attempts.
package leadership
