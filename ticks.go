package leadership

import (
	"reflect"
	"sync"
	"time"
)

// Renewal ticks. A holder renews at the next tick strictly after each
// successful attempt, on a grid of period RenewInterval whose origin is
// shared by every flag of one Store in this process. The holders of flags
// of one Store with one RenewInterval are then due at the same instants,
// so a store that batches the attempts due together (postgres) renews
// them in a few round trips per RenewInterval instead of one per flag.
//
// What it keeps: the wait after a successful attempt is in
// (0, RenewInterval], never longer than the fixed RenewInterval it
// replaces, so the next renewal is sent at most RenewInterval after the
// reply and the relation checked at Build (RenewInterval + Timeout <
// Lease − SafetyMargin) still guarantees that a renewal can complete
// inside the trust window. What it costs: the first renewal of a term
// comes at the first tick after the acquisition, earlier than
// RenewInterval, so at most one extra renewal per term. Retries after a
// failure and the attempts of followers keep their own schedules. Ticks
// count by the monotonic clock, as the trust window does.

// tickOrigins holds the origin of the ticks of each Store that has open
// flags in this process, with the number of them; the entry goes with the
// last flag, so a closed store is not kept alive.
var tickOrigins = struct {
	sync.Mutex
	m map[any]*tickOrigin
}{m: map[any]*tickOrigin{}}

type tickOrigin struct {
	at    time.Time // the base of the store's first open flag
	flags int
}

// joinTicks returns the offset of the ticks of store from base (the
// flag's clock origin): instants t of the flag (in [Flag.now] units) where
// t + offset is a multiple of the period are ticks. It also returns the
// function that leaves them, to be called once when the flag shuts down.
// A store that cannot be a map key (a struct value holding a slice, say)
// gets ticks of its own per flag.
func joinTicks(store Store, base time.Time) (offset int64, leave func()) {
	if store == nil || !reflect.ValueOf(store).Comparable() {
		return 0, func() {}
	}
	o := &tickOrigins
	o.Lock()
	defer o.Unlock()
	t, ok := o.m[store]
	if !ok {
		t = &tickOrigin{at: base}
		o.m[store] = t
	}
	t.flags++
	return int64(base.Sub(t.at)), func() {
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
// the next renewal tick, or RenewInterval when the flag was built to renew
// on its own schedule (a test hook, for comparisons).
func (f *Flag) renewDelay() time.Duration {
	if f.c.ownRenewSchedule {
		return f.c.renewInterval
	}
	return untilTick(f.now(), f.tickOffset-int64(f.c.tickShift), f.c.renewInterval)
}
