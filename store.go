package leadership

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// Store keeps one versioned row per flag name in a database shared by every
// process that competes for the flag. The [Flag] algorithm talks to the
// database only through this interface; the subpackages sqlite, postgres and
// mysql implement it, and package storetest checks an implementation against
// the contract written here.
//
// A row holds the flag's name, its holder ("" when nobody holds it), its
// version and two instants read from the database's own clock: when the
// current term was last acquired or renewed, and when it expires. Every
// decision that depends on time is taken by the database inside the statement
// that writes, using its own clock, so the clocks of the competing processes
// never matter.
//
// All methods must be safe for concurrent use by many goroutines and by many
// processes sharing the database. Methods return an error wrapping
// [ErrInvalidArgument] for a request that fails [Request.Validate] or carries
// an invalid name, without touching the database.
//
// A store may also have the capabilities that flags and tools look for,
// each an interface below: [ReleaseNotifier] and [ProcessNotifier]
// (release notifications), [AcquireBatcher] (batched attempts, renewals
// at shared ticks), [SchemaVersioner] and [Quarantiner].
type Store interface {
	// Migrate creates or upgrades the schema. It is idempotent and safe to
	// run from several processes at once.
	Migrate(ctx context.Context) error

	// Acquire acquires or renews the flag req.Name for the term
	// (req.Holder, req.Version), in one conditional statement judged by the
	// database clock (one round trip on a networked database):
	//
	//   - If the row is held by exactly that term (same holder and
	//     req.Version > 0 equal to the row's version), the term is renewed:
	//     the version is kept and the expiry becomes database-now + req.Lease.
	//     This holds even when the row has expired, because nobody else held
	//     the flag in between.
	//   - Otherwise, if there is no row, or the row's expiry is at or before
	//     database-now (a released row expires at its release), a new term
	//     starts: the holder becomes req.Holder, the version increases (by
	//     one, and a new row starts at version 1, except that a store with a
	//     failover guard numbers new terms from its clock after a new
	//     database incarnation: see [Quarantiner]) and the expiry becomes
	//     database-now + req.Lease.
	//   - Otherwise nothing changes.
	//
	// A row at the largest version, math.MaxInt64 (a row edited by hand),
	// can start no new term: an attempt that would start one returns an
	// error naming the flag, and only that attempt (the other requests of
	// a batch are decided as usual); its current term is still renewed and
	// released as usual.
	//
	// The result reports the row as it stands after the statement, whether
	// the term now belongs to the requester, and the database clock at the
	// statement. A losing request still reports who holds the flag and until
	// when, so a follower can schedule its next attempt for the expiry.
	Acquire(ctx context.Context, req Request) (Result, error)

	// Release ends the term (holder, version) if it still holds the row:
	// the holder becomes "" and the expiry becomes database-now, so any
	// process may acquire at once; the version is kept. It reports whether
	// the row was released. Releasing a term that no longer holds the row
	// changes nothing and is not an error.
	Release(ctx context.Context, name, holder string, version int64) (bool, error)

	// Evict removes the holder of the row, whatever its term, keeping the
	// version and the expiry. The evicted holder's renewals fail from then
	// on, while nobody else can acquire before the expiry has passed by the
	// database clock, so an evicted holder that still trusts its term
	// cannot overlap with the next one. It reports whether a holder was
	// removed; evicting a free or unknown flag is not an error.
	Evict(ctx context.Context, name string) (bool, error)

	// Flags returns every row, ordered by name, with the database clock at
	// the time of the read.
	Flags(ctx context.Context) ([]Record, time.Time, error)
}

// ReleaseNotifier is implemented by stores that can tell waiting processes
// at once that a flag was released, so that a graceful handover does not
// wait for the next poll. The postgres store implements it with
// LISTEN/NOTIFY; the memory store notifies the flags of the same process;
// the sqlite store notifies the flags of the same process and, on Linux,
// those of other processes through a file watcher, and the mysql store
// those of other processes through user-level locks, as a hint neither
// claims ([ProcessNotifier] is the claim; their HintsOtherProcesses
// method, which flags do not use, lets the conformance suite check the
// hint).
type ReleaseNotifier interface {
	// NotifyReleases returns a channel that receives a value (it is
	// buffered; values are dropped, never blocked on, when one is already
	// pending) after the flag name may have been released, and a function
	// that stops the notifications. A notification is a hint to attempt
	// now, never a promise: the channel may stay silent when the
	// notification path is broken, so callers keep polling.
	NotifyReleases(name string) (<-chan struct{}, func())
}

// ProcessNotifier is a [ReleaseNotifier] whose notifications can reach
// the flags of every process sharing the database, not only those of the
// same Store value (the postgres store). Followers then need not poll for
// a graceful release, so the default [FlagBuilder.PollInterval] on such a
// store is Lease without the 2 s cap: followers attempt at the holder's
// expiry.
//
// Only liveness rests on it, never safety: a store that reports true
// while a release does not reach every process delays a handover to the
// holder's expiry, up to one lease.
type ProcessNotifier interface {
	ReleaseNotifier
	// NotifiesOtherProcesses reports whether a release by any process
	// sharing the database now reaches this store's NotifyReleases
	// channels (the postgres store: once its listener has received a
	// notification it sent itself). It reports false while that is not
	// confirmed, while the notification path is broken, and when
	// notifications never arrive (behind a pooler in transaction mode); a
	// flag caps its poll at 2 s while it does. It must be cheap and safe
	// for concurrent use: a flag asks it before each wait.
	NotifiesOtherProcesses() bool
}

// AcquireBatcher is implemented by stores that send the Acquire calls
// that are due together in batches (the postgres, mysql and sqlite
// stores). The holders of the flags of such a store renew at ticks they
// share ([RenewalTicks]), so that their renewals are due at one instant
// and travel in a few batches per RenewInterval, whatever the load,
// instead of batching only when attempts happen to overlap.
//
// Batching must keep the contract of [Store.Acquire] for each call: the
// statement that decides a call is sent after the call began (a flag
// counts its trust window from before the call, so a call must never
// take the result of a statement already on its way), it is decided by
// the rules of Acquire as if sent alone after those before it in its
// batch, and the call returns a result only once its statement has
// committed; an error after which the statement may have taken effect is
// returned as an error, as a lost reply is.
type AcquireBatcher interface {
	// MaxAcquireBatch is the most Acquire calls the store sends in one
	// batch, at least 1.
	MaxAcquireBatch() int
	// RenewalTicks returns the grid of renewal ticks of the store's flags
	// in this process: a RenewalTicks that the Store value keeps (its
	// zero value is ready to use), the same at every call, shared with no
	// other Store.
	RenewalTicks() *RenewalTicks
}

// RenewalTicks is the grid of renewal ticks shared by the flags of one
// [AcquireBatcher] in this process. A holder renews at the next tick
// strictly after each successful attempt, on a grid of period
// RenewInterval whose origin is the start of the first of the store's
// open flags. The holders of flags of one store with one RenewInterval are
// then due at the same instants and the store renews them in a few round
// trips per RenewInterval instead of one per flag.
//
// A burst of every flag of a large store at one instant would queue most
// of them behind several batches, and their wait counts against Timeout.
// So the flags of a store are grouped in the order they were built, half
// a batch to a group, and each group has its own phase in the grid, the
// phases spread over the interval by the golden ratio (each new group
// lands in the largest gap left by those before it): a tick then carries
// at most one batch of each store. When the store's last open flag
// closes, the grid starts afresh.
//
// What it keeps: the wait after a successful attempt is in
// (0, RenewInterval], never longer than the fixed RenewInterval it
// replaces, so the next renewal is sent at most RenewInterval after the
// reply and the relation checked at Build (RenewInterval + Timeout <
// Lease − SafetyMargin) still guarantees that a renewal can complete
// inside the trust window. What it costs: the first renewal of a term
// comes at the first tick after the acquisition, earlier than
// RenewInterval, so at most one extra renewal per term. Retries after a
// failure and the attempts of followers keep their own schedules, and so
// do flags on stores that do not batch, where shared ticks would only
// make bursts. Ticks count by the monotonic clock, as the trust window
// does.
//
// The zero value is ready to use; a RenewalTicks must not be copied after
// first use. Only the flags of this package use it; it has no exported
// methods.
type RenewalTicks struct {
	mu     sync.Mutex
	origin time.Time // the start of the first of the open flags
	open   int       // open flags
	joined int       // flags that joined since the grid was last empty
}

// ticks places the renewal ticks of one flag: the instants t of the flag
// (in [Flag.now] units) where t + offset is a multiple of the period,
// shifted later by phase periods. A nil grid means no ticks.
type ticks struct {
	grid   *RenewalTicks
	offset int64
	phase  float64 // in [0, 1)
}

// goldenFraction is (√5 − 1) / 2: group g's phase is the fractional part
// of g times it.
const goldenFraction = 0.6180339887498949

// join places a flag whose clock origin is base on g, the grid of a store
// that sends at most maxBatch Acquires in one batch. The flag leaves it
// once, when it shuts down. A nil g gives no ticks.
func (g *RenewalTicks) join(base time.Time, maxBatch int) ticks {
	if g == nil {
		return ticks{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == 0 {
		g.origin, g.joined = base, 0
	}
	group := g.joined / max(maxBatch/2, 1)
	g.joined++
	g.open++
	phase := float64(group) * goldenFraction
	phase -= float64(int64(phase))
	return ticks{grid: g, offset: int64(base.Sub(g.origin)), phase: phase}
}

// leave gives up the flag's place on the grid.
func (t ticks) leave() {
	if t.grid != nil {
		t.grid.mu.Lock()
		t.grid.open--
		t.grid.mu.Unlock()
	}
}

// untilTick is the wait from the flag's instant now to the next tick
// strictly after it, in (0, period].
func untilTick(now, offset int64, period time.Duration) time.Duration {
	p := int64(period)
	if p <= 0 {
		return period
	}
	r := (now + offset) % p
	if r < 0 {
		r += p
	}
	return time.Duration(p - r)
}

// SchemaVersioner is implemented by stores whose schema is applied by
// migrations (the mysql, postgres and sqlite stores of this module), for
// tools that report it, such as `leadership migrate`.
type SchemaVersioner interface {
	// SchemaVersion reports the version of the applied migrations (0 when
	// none was applied) and whether one failed or stopped half-way
	// (dirty).
	SchemaVersion(ctx context.Context) (version uint, dirty bool, err error)
}

// Quarantiner is implemented by stores that guard against lost commits
// (the postgres and mysql stores; see docs/failover.md): their acquire
// statement holds every flag of the schema after it notices a new database
// incarnation (a crash recovery or a promoted replica), and an operator can
// impose the same hold by hand, for a failover the store cannot see.
//
// During a hold no new term starts: no takeover of an expired or released
// row and no first acquisition of a name. Holders whose term has not
// expired keep renewing it. The first new terms after a new incarnation
// get versions of at least the database clock in microseconds since 1970
// (the version floor), above every version issued before it: the one
// place where a version increases by more than one.
type Quarantiner interface {
	// Quarantine makes sure that no new term starts before database-now + d:
	// the hold ends at the later of that instant and the end of the hold
	// already in force, never earlier. It returns the end of the hold by
	// the database clock. d must be positive. No new term starts after it
	// returned, also by an acquire statement sent before and still in
	// flight (one waiting for a flag's row lock, held by a fenced
	// transaction): that one either committed before Quarantine returned
	// (the postgres store's Quarantine waits for it) or sees the hold
	// before it commits (the mysql store's acquire reads the guard again).
	Quarantine(ctx context.Context, d time.Duration) (until time.Time, err error)

	// QuarantinedUntil reports the end of the hold in force by the
	// database clock (before now when there is none), and the database
	// clock. It writes nothing.
	QuarantinedUntil(ctx context.Context) (until, now time.Time, err error)
}

// Request asks a [Store] to acquire or renew a flag for a term.
type Request struct {
	// Name of the flag (the row's key).
	Name string
	// Holder is the process that asks; never "".
	Holder string
	// Version is the version of the term the holder believes it holds,
	// or 0 when it holds none.
	Version int64
	// Lease is how long after database-now the new expiry lies.
	Lease time.Duration
}

// Result is the outcome of [Store.Acquire].
type Result struct {
	// Record is the row as it stands after the statement. When a losing
	// request races with a concurrent change, it may be the row as it stood
	// just before; it is advisory for the loser.
	Record
	// Acquired is true when the term (Holder, Version) of Record now
	// belongs to the requester: either its own term was renewed or a new
	// term was started for it.
	Acquired bool
	// Now is the database clock at the statement.
	Now time.Time
}

// Record is one flag's row.
type Record struct {
	Name string
	// Holder is "" when nobody holds the flag.
	Holder string
	// Version is the fencing token: it increases at every new term (see
	// [Store.Acquire]) and never changes otherwise.
	Version int64
	// RenewedAt is when the current term was last acquired or renewed, by
	// the database clock.
	RenewedAt time.Time
	// ExpiresAt is when the current term expires, by the database clock.
	ExpiresAt time.Time
}

// Limits on names that every store accepts.
const (
	// MaxNameLength is the longest flag name or holder, in bytes.
	MaxNameLength = 255
	// MinLease is the shortest lease a store accepts. Database clocks
	// have at best microsecond and at worst millisecond precision; leases
	// are meant to be seconds.
	MinLease = 10 * time.Millisecond
)

// Validate reports whether the request is well formed, with an error
// wrapping [ErrInvalidArgument] that names the field to fix.
func (r Request) Validate() error {
	if err := ValidateName("name", r.Name); err != nil {
		return err
	}
	if err := ValidateName("holder", r.Holder); err != nil {
		return err
	}
	if r.Version < 0 {
		return fmt.Errorf("%w: version %d is negative", ErrInvalidArgument, r.Version)
	}
	if r.Lease < MinLease {
		return fmt.Errorf("%w: lease %v is shorter than the minimum %v", ErrInvalidArgument, r.Lease, MinLease)
	}
	return nil
}

// ValidateName checks a flag name or holder: not empty, at most
// [MaxNameLength] bytes, valid UTF-8 without control characters (Unicode
// category Cc) or format characters (Cf: bidirectional overrides such as
// U+202E, zero-width characters, joiners), which would let a name printed
// to a terminal hide or reorder text, and no space at either end (MySQL's
// collations ignore trailing spaces, so "a " and "a" would be one flag
// there and two elsewhere). The error wraps [ErrInvalidArgument] and names
// the field.
func ValidateName(field, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalidArgument, field)
	case len(s) > MaxNameLength:
		return fmt.Errorf("%w: %s is %d bytes long, longer than the maximum %d", ErrInvalidArgument, field, len(s), MaxNameLength)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidArgument, field, s)
	}
	for _, r := range s {
		switch {
		case unicode.IsControl(r):
			return fmt.Errorf("%w: %s %q contains a control character", ErrInvalidArgument, field, s)
		case unicode.Is(unicode.Cf, r):
			return fmt.Errorf("%w: %s %q contains the invisible format character %U", ErrInvalidArgument, field, s, r)
		}
	}
	if strings.TrimSpace(s) != s {
		return fmt.Errorf("%w: %s %q starts or ends with a space; trim it", ErrInvalidArgument, field, s)
	}
	return nil
}
