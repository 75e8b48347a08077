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
// RenewInterval apart while it holds it (on a store that batches,
// postgres, mysql and sqlite, at ticks shared by the flags of the Store, in
// groups of half a batch, so that their renewals travel together), and
// otherwise schedules its next attempt for the holder's expiry. [Flag.Raised] is one atomic load and one read of
// the monotonic clock.
//
// # Stores
//
// The database is reached through a [Store]: package sqlite (embedded, the
// default), postgres (pgx v5) and mysql (MySQL and MariaDB) implement it;
// memstore is an in-memory store for tests. Package storetest is the
// conformance suite every store passes. Stores apply their schema (package
// migrations, in golang-migrate's format) at [FlagBuilder.Build] unless
// [FlagBuilder.Migrate] is false; a version that a failed migration left
// dirty fails Build with an error that says how to fix it.
//
// # Guarantees
//
//   - Database clock only. Whether a term has expired is decided by the
//     database, with its own clock, inside the statement that acquires or
//     renews. The clocks of the competing processes are never compared.
//   - One round trip per attempt. Acquire-or-renew is one conditional
//     statement that decides and writes (on a networked database; on
//     PostgreSQL with postgres.ShouldPing in the pool's config, since
//     pgxpool's default first pings a connection idle for over a second).
//   - Trust window. A process trusts a term until (its monotonic clock just
//     before the successful attempt was sent) + Lease − SafetyMargin. The
//     database started the term no earlier than that send, so the window ends
//     at least SafetyMargin before the database could let anyone else
//     acquire. Raised compares the clock with the window itself, so it turns
//     false on time even when the background goroutine is stalled (a GC
//     pause, SIGSTOP, a hung database call); a process frozen past its lease
//     never sees Raised true while another holds the flag, and a reply that
//     arrives after its window is not trusted. A suspended machine is
//     another matter: its monotonic clock stops (see Suspend under Safety).
//   - Fencing token. The row's version increases at each new term (each
//     acquisition that is not a renewal) and never changes otherwise:
//     renewals keep it, release keeps it, rows are never deleted, so it never
//     goes backwards. It increases by exactly one, except for the first new
//     terms after the failover guard of the postgres and mysql stores
//     noticed a new database incarnation (see [Quarantiner] and
//     docs/failover.md): those get at least the database clock in
//     microseconds since 1970. A row at math.MaxInt64 starts no new term
//     (an attempt that would start one fails with an error naming the
//     flag). [Flag.Token] returns it while raised.
//   - Fenced transactions. On the flag's own database, a transaction fenced
//     with the flag or a [Term] (the Fence and RunFenced functions of
//     packages postgres, mysql and sqlite) commits only while the row names
//     that term, failing with [ErrNotLeader] otherwise, and no later term
//     starts before it has ended: the writes of different terms to that
//     database never interleave, whatever the stalls of their processes.
//   - Leases are stored, not assumed. The row holds the holder's expiry, so
//     processes configured with different leases never overlap.
//   - Term-scoped renewal. A renewal names the holder and the version it
//     acquired, so two flags built with the same process name (a
//     misconfiguration) never both raise, and a former holder cannot renew a
//     successor's term.
//   - Failover after about one lease. Followers schedule their next attempt
//     for the holder's expiry by the database clock (plus Jitter) and poll at
//     least every PollInterval, so a crashed holder is replaced about one
//     lease after its last renewal. PollInterval is Lease/3 by default,
//     capped at 2 s, unless the store reports, when asked before each
//     wait, that its release notifications reach every process (postgres,
//     once its listener has received a notification it sent itself; see
//     [ProcessNotifier]): then it is Lease, and a follower attempts once
//     per lease, at the holder's expiry.
//   - Prompt graceful handover. [Flag.Close] lowers the flag, then releases
//     the row, which expires at once; followers notice at their next poll, or
//     at once when the store notifies releases (postgres with LISTEN/NOTIFY;
//     sqlite across processes on Linux and mysql through the holder's
//     bell, both as hints; memstore within one process). Notifications
//     bring an attempt forward at most once per Lease/20, so that a flood
//     of them (anyone who can connect can NOTIFY) costs a flag at most one
//     attempt more per Lease/20; a release after a quiet Lease/20 wakes
//     followers at once. With [FlagBuilder.HoldAtLeast], Close lowers at
//     once but keeps the term, renewed, until the hold has passed since it
//     was acquired, then releases it.
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
//   - Safety rests on the assumptions stated under Safety below: the
//     database clock runs at most Lease/(Lease−SafetyMargin) times as fast
//     as any process's monotonic clock (11% with the default margin, far
//     above real drift), so a forward jump of the database clock by more
//     than the margin breaks it (a backward jump only delays failover); a
//     holder's machine is not suspended past its trust window unnoticed
//     (on Linux the flag detects a suspend at its next check; see Suspend
//     for the window that remains); and the database never loses a commit
//     it acknowledged, or the store's failover guard notices when it may
//     have (postgres and mysql; see Durability under Safety). Wall-clock jumps of a process do not matter: it uses
//     its monotonic clock. On SQLite the database clock is the host's: on
//     Linux CLOCK_BOOTTIME, which wall-clock steps do not move; on other
//     systems the wall clock, whose steps are then steps of the database
//     clock (see package sqlite).
//   - A Store with a different contract voids the guarantees; use
//     package storetest on your own stores.
//
// # Safety
//
// Assumptions:
//
//   - Clock rates agree within the safety margin: while the monotonic clock
//     of a process advances by Lease − SafetyMargin, the database clock
//     advances by at most Lease. This is the only assumption about the
//     database clock. A slower database clock is always safe, and so is a
//     backward jump: rows then expire later by that clock, which delays
//     failover by the size of the jump and nothing else.
//   - A statement takes effect between its send and its reply; a statement
//     whose reply never arrives may take effect at any later time, or
//     never. A reply is trusted only for a committed write: the mysql
//     store commits whatever the session's autocommit, and the postgres
//     store fails an attempt made in a session left inside a transaction.
//   - The database never loses a commit it acknowledged, or, on the postgres
//     and mysql stores, the acquire statement notices a new incarnation of
//     the server that may have lost some (see Durability below).
//   - The store obeys the [Store] contract.
//
// Database clock. A forward jump of the database clock breaks the rate
// assumption: by more than SafetyMargin (less what drift has used), it
// makes a row expire while its holder still trusts the term, and a
// follower acquires: two leaders. The postgres and mysql stores read the
// database server's wall clock (now(), UTC_TIMESTAMP(6)), so an NTP step
// forward, an operator's date -s or a failover to a server whose clock is
// ahead does this; let NTP slew that clock instead of stepping it (chrony
// without makestep after boot, ntpd -x). The sqlite store reads the clock
// of the host that runs every process sharing the file: on Linux
// CLOCK_BOOTTIME, which does not step; elsewhere the wall clock, as above.
// memstore, by default, compares Go's monotonic readings.
//
// Suspend. A stopped monotonic clock of the holder breaks the rate
// assumption from the other side: the monotonic clock that Raised reads
// (CLOCK_MONOTONIC on Linux) stops while the machine is suspended, while
// the database clock and the other processes go on, so a holder resumed
// after the end of its trust window would trust its term for as long again
// as it slept. On Linux the flag detects this: CLOCK_BOOTTIME also counts
// the time suspended, and the flag compares how far the two clocks
// advanced, before each send and each precheck since the send that opened
// the trust window, and on each reply or error since its own send. When
// CLOCK_BOOTTIME advanced more than 10 ms further, the flag lowers at once
// and does not trust the reply; the next attempt renews the term from a
// new send if nobody took it. What remains: when a suspend carried the
// machine past the end of the trust window, Raised can be true after the
// resume while another process leads, until the next check. That check
// is the loop's next attempt, which is due by the clock that stopped, so
// at most RenewInterval after the resume (RenewInterval/2 while renewals
// fail), or the return of an attempt or precheck that was in flight at the
// suspend, at most Timeout after the resume: at most max(RenewInterval,
// Timeout), 5 s with the default 15 s lease, plus scheduling delays.
// Raised itself does not check (it stays one clock read); the lowering
// timer does not either, since it fires on the clock that stopped, after
// the next attempt. A job that must not overlap another by that much must
// fence its writes with [Flag.Token]. Not detected at all: a suspend
// shorter than 10 ms (it uses up safety margin like drift), suspend on
// other systems (macOS's monotonic clock also stops during sleep), and a
// pause of a virtual machine that stops the guest's clocks (both clocks
// stop alike; a hypervisor that advances the guest's monotonic clock on
// resume makes a pause look like SIGSTOP, which is safe). There the
// assumption is that a holder's machine is never paused or suspended for
// longer than SafetyMargin.
//
// Durability. Safety also assumes that an acknowledged acquisition or
// renewal survives, or that the store notices when it may not have. When
// the database loses commits, the row falls back to an older state, so
// another process could acquire a term its holder still trusts (a lost
// renewal), or get the same version as the holder (a lost acquisition: two
// terms with one fencing token). This happens when the database server or
// its host crashes while PostgreSQL runs with synchronous_commit=off or
// MySQL or MariaDB with innodb_flush_log_at_trx_commit ≠ 1, and on
// failover to an asynchronous replica that had not received the last
// commits (Patroni's default; managed read replicas). The postgres and
// mysql stores guard against it (the failover guard, docs/failover.md):
// the acquire statement recognises a new server incarnation (crash
// recovery, a promoted replica), then starts no new term in the schema for
// one longest lease (a holder whose term has not expired renews at once),
// and gives every later term a version above the database clock in
// microseconds, above every version the lost commits can have issued. That
// needs three more assumptions: the old primary acknowledges no write after
// the new one's first acquire statement (no split brain); the promoted
// server's clock is not behind the old one's by more than the failover
// took (ahead by any amount is covered); the longest lease in use was
// recorded before the lost commits. The proof is in docs/failover.md, with
// what the guard does not cover (multi-primary replication). For a
// failover the store cannot see (a switch to another cluster, a restore
// from a backup), an operator holds every flag with
// `leadership quarantine` ([Quarantiner]). The sqlite store loses a commit
// only with its host, which ends every process sharing the file too.
//
// Invariant: a process's trust window ends before the database can let
// anyone else acquire. A process trusts a term only after a reply saying
// the statement it sent at time s acquired or renewed that term, and only
// until s + Lease − SafetyMargin by its monotonic clock; [Flag.Raised]
// compares that clock with this instant itself, so a stalled process
// cannot extend it. The statement took effect at some t ≥ s and set the
// row's expiry to database-now(t) + Lease; until the database clock
// reaches that expiry only this term can renew the row, a release comes
// only from its holder after it has lowered, and an eviction keeps the
// expiry. By the rate assumption the database clock reaches it no sooner
// than t + Lease − SafetyMargin ≥ s + Lease − SafetyMargin by the process's
// clock. Hence two trust windows never overlap: at most one flag is
// raised.
//
// Why each rule is needed:
//
//   - Trust window from the send. The send is the last instant known to
//     precede the statement's effect; the reply can come any time later (a
//     slow network, a paused goroutine). Counting from the reply would let
//     a process trust its term beyond the expiry by the reply's delay, and
//     a reply that comes after the window is not trusted at all.
//   - Term-scoped renewal. A renewal names the holder and the version it
//     acquired, so it extends only a term that has been this process's
//     since it acquired it. Renewing any row with the same holder name
//     would let a second flag with that name, or a delayed statement of a
//     former term, extend or take over a term another flag trusts: both
//     would raise.
//   - Expiry stored on the row. Whether a term has expired is decided from
//     the expiry written by the holder's own statement, with its own lease.
//     Recomputing it from the requester's lease would let a process with a
//     shorter lease take over a term that its holder still trusts.
//   - Release keeps the version. The next term gets a higher version, so
//     (holder, version) never names two terms: a delayed renewal of a
//     released term cannot renew a later one, and the fencing token never
//     goes backwards. Evict likewise keeps the version and the expiry, so an
//     evicted holder, which trusts its term to the end of its window, is
//     never overlapped.
//
// The simulation in sim_test.go checks this argument against thousands of
// adversarial schedules in virtual time, and catches a mutant of each rule
// (see the README's Reliability section).
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
// held by another process" with the new "holder"), Warn for failed
// attempts.
package leadership
