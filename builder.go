package leadership

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultLease is the lease used unless [FlagBuilder.Lease] sets another.
// A crashed holder is replaced about one lease after its last renewal. The
// other durations default to fractions of the lease: see each builder
// method.
const DefaultLease = 15 * time.Second

// maxDefaultPollInterval caps the default poll interval on stores whose
// release notifications do not reach other processes; documented on
// [FlagBuilder.PollInterval] as "at most 2 s".
const maxDefaultPollInterval = 2 * time.Second

// FlagBuilder collects the settings of a [Flag]. Create it with [NewFlag],
// chain the setters, then call [FlagBuilder.Build]. Setters never fail;
// Build checks every setting and their relations and names the field to
// fix. A builder is not safe for concurrent use; it may build several
// flags.
type FlagBuilder struct {
	c config
	// jitterSet records an explicit Jitter, whose zero disables jitter
	// instead of asking for the default.
	jitterSet bool
}

// NewFlag returns a builder with the defaults: lease [DefaultLease],
// migrations applied at Build, no logging, no metrics.
func NewFlag() *FlagBuilder {
	return &FlagBuilder{c: config{migrate: true}}
}

// Store sets the database the flag lives in. Mandatory.
func (b *FlagBuilder) Store(s Store) *FlagBuilder { b.c.store = s; return b }

// Name sets the name of the flag: processes using the same name on the
// same database compete for one leadership. Mandatory; at most
// [MaxNameLength] bytes.
func (b *FlagBuilder) Name(name string) *FlagBuilder { b.c.name = name; return b }

// Process sets the name this process is known by in the database (the
// holder). Optional; the default is hostname, pid and a random suffix,
// one per process: every flag of the process built without Process has
// it. Two flags built with the same process name and flag name still
// never both raise: renewal is scoped to the term each acquired.
func (b *FlagBuilder) Process(process string) *FlagBuilder { b.c.process = process; return b }

// Lease sets how long a term lasts after each successful renewal, by the
// database clock. A crashed holder is replaced about one lease after its
// last renewal. Optional; default [DefaultLease]; at least [MinLease].
func (b *FlagBuilder) Lease(d time.Duration) *FlagBuilder { b.c.lease = d; return b }

// RenewInterval sets how often the holder renews its term. Optional;
// default Lease/3. RenewInterval + Timeout must be less than
// Lease − SafetyMargin, so that a renewal can complete inside the trust
// window. On a store that batches the attempts due together (an
// [AcquireBatcher]: postgres, mysql and sqlite), the holders of the flags
// of one Store in this process renew at shared ticks, RenewInterval
// apart, so that the store renews them in a few round trips: after each
// successful attempt the next renewal comes at the next tick, never later
// than RenewInterval, so the first renewal of a term comes earlier. The
// flags of a large store are split into groups of half a batch, each group
// on ticks of its own, so that no tick queues a flag behind more than one
// batch ([RenewalTicks]).
func (b *FlagBuilder) RenewInterval(d time.Duration) *FlagBuilder { b.c.renewInterval = d; return b }

// PollInterval bounds how long a follower waits between attempts, so it
// notices a release quickly even without a push notification. Followers
// otherwise schedule their attempt for the holder's expiry. Optional;
// default Lease/3, at most 2 s, unless the store notifies releases to
// other processes (a [ProcessNotifier]: the postgres store): there
// a release wakes followers at once and a crashed holder is replaced at
// its expiry anyway, so a follower has no reason to ask earlier, and the
// default is Lease: a follower attempts about once per lease, at the
// holder's expiry (plus jitter), and the poll only bounds the wait after a
// lost notification. The store is asked before each wait, and the 2 s cap
// applies whenever it reports its notifications unavailable. A flag logs
// the value it uses, before that cap, in its "flag starting" record at
// Debug level.
func (b *FlagBuilder) PollInterval(d time.Duration) *FlagBuilder { b.c.pollInterval = d; return b }

// Timeout bounds each database call (acquire, renew, release). Optional;
// default Lease/5.
func (b *FlagBuilder) Timeout(d time.Duration) *FlagBuilder { b.c.timeout = d; return b }

// SafetyMargin is how long before the earliest possible expiry the holder
// lowers its flag: the trust window of a term is (local monotonic time
// just before the successful attempt was sent) + Lease − SafetyMargin. It
// absorbs differences in clock rate between this process and the database
// and the database clock's precision. Optional; default Lease/10; more than
// zero and at most Lease/2.
func (b *FlagBuilder) SafetyMargin(d time.Duration) *FlagBuilder { b.c.safetyMargin = d; return b }

// Jitter sets the upper bound of a random delay added to each follower
// attempt, so that followers do not all hit the database at the same
// instant after an expiry. Optional; default Lease/20; zero disables it.
func (b *FlagBuilder) Jitter(d time.Duration) *FlagBuilder {
	b.c.jitter = d
	b.jitterSet = true
	return b
}

// Logger sets the structured logger: Debug for routine renewals, Info for
// transitions (a follower's included: once per change of the holder),
// Warn for failed attempts. Optional; default discards.
func (b *FlagBuilder) Logger(l *slog.Logger) *FlagBuilder { b.c.logger = l; return b }

// MetricsRegisterer sets where the flag registers its Prometheus metrics
// (see the package documentation). Optional; nil or unset means no
// metrics. Several flags may share one registerer.
func (b *FlagBuilder) MetricsRegisterer(r prometheus.Registerer) *FlagBuilder {
	b.c.registerer = r
	return b
}

// Migrate sets whether Build applies the store's schema migrations
// (idempotent). Optional; default true. Turn it off when migrations are run
// by a deployment step (docs/operations.md in the repository).
func (b *FlagBuilder) Migrate(apply bool) *FlagBuilder { b.c.migrate = apply; return b }

// Precheck sets a hook called before every attempt, with a context bounded
// by Timeout. When it returns an error the attempt is not made, and a held
// flag is lowered and released: the hook vetoes leadership (for example
// while this process is draining or not in the active region).
func (b *FlagBuilder) Precheck(fn func(context.Context) error) *FlagBuilder {
	b.c.precheck = fn
	return b
}

// OnRaise sets a function started in its own goroutine each time the flag
// is raised, with a context that is cancelled when that term of leadership
// ends (lost, trust window over, or Close). It should return soon after the
// context is done.
func (b *FlagBuilder) OnRaise(fn func(ctx context.Context)) *FlagBuilder { b.c.onRaise = fn; return b }

// OnLower sets a function called each time the flag is lowered after having
// been raised. Calls to OnLower are made one at a time, in order, from one
// goroutine; Close waits for the last one to return, so OnLower must not
// call Close.
func (b *FlagBuilder) OnLower(fn func()) *FlagBuilder { b.c.onLower = fn; return b }

// HoldAtLeast keeps the flag held in the database until at least d after
// this process acquired it, even when [Flag.Close] comes sooner: for a job
// that runs once per schedule on every host (cron, systemd timers, a
// Kubernetes CronJob), so that a host whose schedule fires up to d later
// finds the flag held and skips the job instead of running it again.
// Optional; default 0 (Close releases at once).
//
// Close then lowers the flag at once (Raised is false, LeaderContext and
// OnRaise contexts are cancelled, OnLower is called: the job must not run
// any more), keeps renewing the term every RenewInterval until d after the
// instant the acquiring reply arrived, releases it, and only then returns.
// If the process dies during the hold, the term expires about one lease
// after its last renewal instead. The hold counts by this process's
// monotonic clock from the start of the term it holds at Close; a term
// lost before Close is not held.
func (b *FlagBuilder) HoldAtLeast(d time.Duration) *FlagBuilder { b.c.holdAtLeast = d; return b }

// config is the set of settings: as given to the builder, then validated
// and completed by [FlagBuilder.config]. A new setting is a field here and
// a setter above (plus its default and checks in FlagBuilder.config).
type config struct {
	store         Store
	name          string
	process       string
	lease         time.Duration
	renewInterval time.Duration
	pollInterval  time.Duration
	timeout       time.Duration
	safetyMargin  time.Duration
	jitter        time.Duration
	logger        *slog.Logger
	registerer    prometheus.Registerer
	migrate       bool
	precheck      func(context.Context) error
	onRaise       func(context.Context)
	onLower       func()
	holdAtLeast   time.Duration

	// Test hooks, set per flag through export_test.go.

	// randInt64N draws the random jitter and backoff; nil means
	// rand.Int64N. The simulation makes it a function of virtual time so
	// that a seed replays exactly.
	randInt64N func(n int64) int64
	// newTerm builds the term an acquiring reply gives; nil means the
	// trust rule, newTerm. The simulation's mutant replaces it with a
	// wrong rule that it must catch.
	newTerm func(c *config, prev term, version, sent, replied int64) term
	// clocks reads the clock pair of suspend detection; nil means the
	// operating system's clocks.
	clocks clockPair
	// tickShift moves the renewal ticks of the flag later by this much
	// (less than RenewInterval): the simulation gives each flag its own
	// so that no two events of a schedule fall on one virtual instant,
	// whose goroutines would run in an order the seed does not fix.
	tickShift time.Duration

	// pollNotifier is the store when the poll interval is the default on
	// a store that can notify other processes; nil otherwise.
	pollNotifier ProcessNotifier
}

// config completes the defaults and checks every setting, joining one
// error per wrong field.
func (b *FlagBuilder) config() (config, error) {
	c := b.c
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...))
	}
	if c.store == nil {
		bad("Store is mandatory and nil")
	}
	if err := ValidateName("Name", c.name); err != nil {
		errs = append(errs, err)
	}
	if c.process == "" {
		c.process = defaultProcess()
	} else if err := ValidateName("Process", c.process); err != nil {
		errs = append(errs, err)
	}
	if c.lease == 0 {
		c.lease = DefaultLease
	}
	if c.lease < MinLease {
		bad("Lease %v is shorter than the minimum %v", c.lease, MinLease)
		c.lease = DefaultLease // keep checking the other fields against something sane
	}
	defaultTo := func(d *time.Duration, def time.Duration, field string) {
		switch {
		case *d == 0:
			*d = def
		case *d < 0:
			bad("%s %v is negative", field, *d)
			*d = def
		}
	}
	defaultTo(&c.renewInterval, c.lease/3, "RenewInterval")
	if n, ok := c.store.(ProcessNotifier); ok && c.pollInterval == 0 {
		c.pollNotifier = n // asked before each wait: Flag.pollInterval
	}
	defaultTo(&c.pollInterval, defaultPollInterval(c.store, c.lease), "PollInterval")
	defaultTo(&c.timeout, c.lease/5, "Timeout")
	defaultTo(&c.safetyMargin, c.lease/10, "SafetyMargin")
	if !b.jitterSet {
		c.jitter = c.lease / 20
	} else if c.jitter < 0 {
		bad("Jitter %v is negative", c.jitter)
	}
	if c.holdAtLeast < 0 {
		bad("HoldAtLeast %v is negative", c.holdAtLeast)
	}
	if c.safetyMargin > c.lease/2 {
		bad("SafetyMargin %v is more than half the Lease %v", c.safetyMargin, c.lease)
	}
	if window := c.lease - c.safetyMargin; c.renewInterval+c.timeout >= window {
		bad("RenewInterval %v + Timeout %v must be less than Lease %v − SafetyMargin %v, so that a renewal completes inside the trust window",
			c.renewInterval, c.timeout, c.lease, c.safetyMargin)
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.randInt64N == nil {
		c.randInt64N = mathrand.Int64N
	}
	if c.newTerm == nil {
		c.newTerm = newTerm
	}
	return c, errors.Join(errs...)
}

// defaultPollInterval is Lease on a store that can notify releases to
// other processes (whether its notifications arrive is asked before each
// wait, Flag.pollInterval, which caps the wait at maxDefaultPollInterval
// while they do not), else Lease/3 capped at maxDefaultPollInterval.
func defaultPollInterval(store Store, lease time.Duration) time.Duration {
	if _, ok := store.(ProcessNotifier); ok {
		return lease
	}
	return min(lease/3, maxDefaultPollInterval)
}

// defaultProcess names this process: hostname, pid and a random suffix,
// computed once, so that every flag of the process built without
// [FlagBuilder.Process] leads under one holder name (the mysql store then
// follows a process through one lock). Two flags of one process with the
// same flag name and this holder never both raise: renewal is scoped to
// the term each acquired.
var defaultProcess = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics on failure instead)
	name := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	if len(name) > MaxNameLength {
		name = name[len(name)-MaxNameLength:]
	}
	return name
})

// Build checks the settings, applies the store's migrations (unless
// [FlagBuilder.Migrate] turned that off), registers the metrics, makes the
// first attempt to acquire the flag and starts the background loop. It
// returns an error naming the field for bad settings, and the database
// error if the migrations or the first attempt fail; then nothing keeps
// running. ctx bounds the migrations and the first attempt only: the flag
// runs until [Flag.Close], whatever becomes of ctx, so that a service can
// stop its scheduler first, then close the flag, then its pool. The
// returned flag must be closed with [Flag.Close].
func (b *FlagBuilder) Build(ctx context.Context) (*Flag, error) {
	c, err := b.config()
	if err != nil {
		return nil, err
	}
	if c.migrate {
		if err := c.store.Migrate(ctx); err != nil {
			return nil, fmt.Errorf("leadership: apply migrations: %w", err)
		}
	}
	m, err := newMetrics(c.registerer, c.name, c.process)
	if err != nil {
		return nil, err
	}
	f := newFlag(c, m)
	m.watch(f)
	if err := f.start(ctx); err != nil {
		return nil, err
	}
	return f, nil
}
