package leadership

import (
	"reflect"
	"sync"
	"time"
)

// Renewal ticks. On a store that sends the Acquires due together in
// batches (an acquireBatcher: packages postgres, mysql and sqlite), a
// holder renews at the next tick strictly after each successful attempt,
// on a grid of period RenewInterval whose origin is shared by the flags
// of that Store in this process. The holders of flags of one Store with
// one RenewInterval are then due at the same instants and the store
// renews them in a few round trips per RenewInterval instead of one per
// flag.
//
// A burst of every flag of a large store at one instant would queue most
// of them behind several batches, and their wait counts against Timeout.
// So the flags of a store are grouped in the order they were built, half
// a batch to a group, and each group has its own phase in the grid, the
// phases spread over the interval by the golden ratio (each new group
// lands in the largest gap left by those before it): a tick then carries
// at most one batch of each store.
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

// acquireBatcher is a Store that sends the Acquire calls that are due
// together in batches of at most MaxAcquireBatch.
type acquireBatcher interface {
	MaxAcquireBatch() int
}

// tickOrigins holds the grid of each batching Store that has open flags
// in this process; the entry goes with the last flag, so a closed store
// is not kept alive.
var tickOrigins = struct {
	sync.Mutex
	m map[any]*tickOrigin
}{m: map[any]*tickOrigin{}}

type tickOrigin struct {
	at     time.Time // the base of the store's first open flag
	flags  int       // open flags
	joined int       // flags that joined since the entry was made
}

// ticks places the renewal ticks of one flag: the instants t of the flag
// (in [Flag.now] units) where t + offset is a multiple of the period,
// shifted later by phase periods.
type ticks struct {
	on     bool
	offset int64
	phase  float64 // in [0, 1)
}

// goldenFraction is (√5 − 1) / 2: group g's phase is the fractional part
// of g times it.
const goldenFraction = 0.6180339887498949

// joinTicks returns the ticks of a flag on store whose clock origin is
// base, and the function that leaves them, to be called once when the
// flag shuts down. Ticks are off on a store that does not batch, and on
// one that cannot be a map key (a struct value holding a slice, say).
func joinTicks(store Store, base time.Time) (ticks, func()) {
	b, ok := store.(acquireBatcher)
	if !ok || !reflect.ValueOf(store).Comparable() {
		return ticks{}, func() {}
	}
	group := max(b.MaxAcquireBatch()/2, 1)
	o := &tickOrigins
	o.Lock()
	defer o.Unlock()
	t, ok := o.m[store]
	if !ok {
		t = &tickOrigin{at: base}
		o.m[store] = t
	}
	g := t.joined / group
	t.joined++
	t.flags++
	phase := float64(g) * goldenFraction
	phase -= float64(int64(phase))
	return ticks{on: true, offset: int64(base.Sub(t.at)), phase: phase}, func() {
		o.Lock()
		defer o.Unlock()
		if t.flags--; t.flags == 0 {
			delete(o.m, store)
		}
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

// renewDelay is the wait after a successful attempt of the holder: until
// its next renewal tick, or RenewInterval when ticks are off.
func (f *Flag) renewDelay() time.Duration {
	t, r := f.ticks, f.c.renewInterval
	if !t.on || f.c.ownRenewSchedule {
		return r
	}
	shift := int64(t.phase*float64(r)) + int64(f.c.tickShift)
	return untilTick(f.now(), t.offset-shift, r)
}
