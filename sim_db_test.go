package leadership_test

// The simulation's database models (see sim_test.go): the database clock,
// whose rate the adversary changes, and the mutant stores that each break
// one rule of the Store contract.

import (
	"context"
	"sync"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/memstore"
)

// simClock is the database clock: it runs at a rate, relative to the
// processes' clocks, that the adversary changes; it never goes backwards.
type simClock struct {
	mu     sync.Mutex
	origin time.Time // virtual instant of the last change of rate
	base   time.Time // database time at origin
	rate   float64
}

func newSimClock() *simClock {
	now := time.Now()
	return &simClock{origin: now, base: now, rate: 1}
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *simClock) nowLocked() time.Time {
	return c.base.Add(time.Duration(float64(time.Since(c.origin)) * c.rate))
}

func (c *simClock) SetRate(r float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base, c.origin, c.rate = c.nowLocked(), time.Now(), r
}

// mutantStore wraps the simulation's memstore and breaks one rule of the
// Store contract. Its mutex makes each read-then-write atomic.
type mutantStore struct {
	*memstore.Store
	kind  string
	clock *simClock

	mu     sync.Mutex
	offset map[string]int64 // release-resets-version: the inner version shown as 0
}

func (m *mutantStore) row(ctx context.Context, name string) (leadership.Record, bool) {
	rows, _, _ := m.Store.Flags(ctx)
	for _, r := range rows {
		if r.Name == name {
			return r, true
		}
	}
	return leadership.Record{}, false
}

func (m *mutantStore) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch m.kind {
	case mutantRenewAnyTerm:
		if row, ok := m.row(ctx, req.Name); ok && row.Holder == req.Holder {
			req.Version = row.Version // any term of this holder counts as its own
		}
	case mutantExpiryByRequest:
		row, ok := m.row(ctx, req.Name)
		own := row.Holder == req.Holder && row.Version == req.Version
		if ok && row.Holder != "" && !own && !row.RenewedAt.Add(req.Lease).After(m.clock.Now()) {
			// judged expired by the requester's lease, not the stored expiry
			_, _ = m.Store.Release(ctx, req.Name, row.Holder, row.Version)
		}
	case mutantReleaseResets:
		off := m.offset[req.Name]
		if req.Version > 0 {
			req.Version += off
		}
		res, err := m.Store.Acquire(ctx, req)
		res.Version -= off
		return res, err
	}
	return m.Store.Acquire(ctx, req)
}

func (m *mutantStore) Release(ctx context.Context, name, holder string, version int64) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.kind != mutantReleaseResets {
		return m.Store.Release(ctx, name, holder, version)
	}
	ok, err := m.Store.Release(ctx, name, holder, version+m.offset[name])
	if ok { // the version restarts from 0
		row, _ := m.row(ctx, name)
		m.offset[name] = row.Version
	}
	return ok, err
}

func (m *mutantStore) Evict(ctx context.Context, name string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.kind != mutantEvictFrees {
		return m.Store.Evict(ctx, name)
	}
	row, ok := m.row(ctx, name)
	if !ok || row.Holder == "" {
		return false, nil
	}
	return m.Store.Release(ctx, name, row.Holder, row.Version) // frees the row at once
}
