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
// A background goroutine per flag acquires the row, renews it every
// RenewInterval while it holds it, and otherwise schedules its next attempt
// for the holder's expiry. [Flag.Raised] is one atomic load and one read of
// the monotonic clock.
//
// # Stores
//
// The database is reached through a [Store]: package sqlite (embedded, the
// default), postgres (pgx v5) and mysql (MySQL and MariaDB) implement it;
// memstore is an in-memory store for tests. Package storetest is the
// conformance suite every store passes. Stores apply their schema (package
// migrations) with golang-migrate at [FlagBuilder.Build] unless
// [FlagBuilder.Migrate] is false.
//
// # Guarantees
//
//   - Database clock only. Whether a term has expired is decided by the
//     database, with its own clock, inside the statement that acquires or
//     renews. The clocks of the competing processes are never compared.
//   - One round trip per attempt. Acquire-or-renew is one conditional
//     statement that decides and writes (on a networked database).
//   - Trust window. A process trusts a term until (its monotonic clock just
//     before the successful attempt was sent) + Lease − SafetyMargin. The
//     database started the term no earlier than that send, so the window ends
//     at least SafetyMargin before the database could let anyone else
//     acquire. Raised compares the clock with the window itself, so it turns
//     false on time even when the background goroutine is stalled (a GC
//     pause, SIGSTOP, a hung database call); a process frozen past its lease
//     never sees Raised true while another holds the flag, and a reply that
//     arrives after its window is not trusted.
//   - Fencing token. The row's version increases by exactly one at each new
//     term (each acquisition that is not a renewal) and never otherwise;
//     renewals keep it, release keeps it, rows are never deleted, so it never
//     goes backwards. [Flag.Token] returns it while raised.
//   - Leases are stored, not assumed. The row holds the holder's expiry, so
//     processes configured with different leases never overlap.
//   - Term-scoped renewal. A renewal names the holder and the version it
//     acquired, so two flags built with the same process name (a
//     misconfiguration) never both raise, and a former holder cannot renew a
//     successor's term.
//   - Failover after about one lease. Followers schedule their next attempt
//     for the holder's expiry by the database clock (plus Jitter) and poll at
//     least every PollInterval, so a crashed holder is replaced about one
//     lease after its last renewal.
//   - Prompt graceful handover. [Flag.Close] lowers the flag, then releases
//     the row, which expires at once; followers notice at their next poll, or
//     at once when the store notifies releases (postgres with LISTEN/NOTIFY;
//     sqlite and memstore within one process).
//   - Errors lower nothing early. A failed renewal is retried with backoff;
//     the flag stays raised until the end of its trust window, is lowered
//     then, and is raised again when the database answers and the term is
//     still (or again) this process's.
//
// # Non-guarantees
//
//   - The flag cannot stop work that is already running. When a term ends,
//     Raised turns false and the context from [Flag.LeaderContext] (and the
//     one given to OnRaise) is cancelled, but a job must check them. A job
//     that writes to a resource outside the database should pass
//     [Flag.Token] along and have the resource refuse tokens lower than the
//     highest it has seen; the flag cannot protect resources that do not.
//   - Safety assumes that the database clock does not jump backwards and
//     that the clocks of the processes and the database run at the same rate
//     within SafetyMargin over one Lease (SafetyMargin is Lease/10 by
//     default: a tolerance of 10%, far above real drift). Wall-clock jumps of
//     a process do not matter: it uses its monotonic clock.
//   - A Store with a different contract voids the guarantees; use
//     package storetest on your own stores.
//
// # Metrics
//
// With [FlagBuilder.MetricsRegisterer], a flag registers on the given
// registry only: [MetricState] (gauge, 1 while raised), [MetricTransitions],
// [MetricAttemptDuration] and [MetricErrors], each labelled with the flag's
// name and the process. Several flags share the collectors of one
// registry; a closed flag deletes its series.
//
// # Logging
//
// Logs go to the [log/slog] logger given with [FlagBuilder.Logger] (none by
// default) with the keys "flag", "process", "holder" and "version": Debug
// for routine renewals, Info for raise, lower and release, Warn for failed
// attempts.
package leadership
