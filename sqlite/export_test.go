package sqlite

import (
	"context"
	"database/sql"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
	"github.com/dbflag/leadership/internal/testkit/batchtest"
)

// FakeClock is a clock for tests. Its host and wall clocks follow the
// real monotonic clock from where it was made, plus what the test adds:
// [FakeClock.StepWall] moves the wall clock alone, as an NTP step or
// `date -s` does; [FakeClock.Advance] moves both, as time passing does.
type FakeClock struct {
	start time.Time
	boot  string
	wall0 int64

	mu               sync.Mutex
	hostAdd, wallAdd time.Duration

	hostReads, wallReads atomic.Int64
	lastHostRead         atomic.Pointer[time.Time]

	tb *timebase
}

// NewFakeClock returns a clock of the boot named boot.
func NewFakeClock(boot string) *FakeClock {
	c := &FakeClock{start: time.Now(), boot: boot, wall0: time.Now().UnixMilli()}
	tb, err := newTimebase(c)
	if err != nil {
		panic(err)
	}
	c.tb = tb
	return c
}

// NewWithClock is New with a store that reads c instead of the host's
// clock.
func NewWithClock(db *sql.DB, c *FakeClock) (*Store, error) { return newStore(db, c.tb) }

func (c *FakeClock) bootID() (string, error) { return c.boot, nil }

func (c *FakeClock) hostMillis() int64 {
	now := time.Now()
	c.hostReads.Add(1)
	c.lastHostRead.Store(&now)
	c.mu.Lock()
	defer c.mu.Unlock()
	return 1e9 + (now.Sub(c.start) + c.hostAdd).Milliseconds()
}

func (c *FakeClock) wallMillis() int64 {
	c.wallReads.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall0 + (time.Since(c.start) + c.wallAdd).Milliseconds()
}

// StepWall moves the wall clock by d; the host clock does not move.
func (c *FakeClock) StepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wallAdd += d
}

// Advance moves both clocks by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hostAdd += d
	c.wallAdd += d
}

// Wall reads the wall clock without counting the read.
func (c *FakeClock) Wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.UnixMilli(c.wall0 + (time.Since(c.start) + c.wallAdd).Milliseconds())
}

// Reads reports how often each clock was read.
func (c *FakeClock) Reads() (host, wall int64) { return c.hostReads.Load(), c.wallReads.Load() }

// LastHostRead reports when the host clock was last read, by the real clock.
func (c *FakeClock) LastHostRead() time.Time {
	if t := c.lastHostRead.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// HostMillis reads the host clock as the store reads it.
func HostMillis() (int64, error) {
	tb, err := system()
	if err != nil {
		return 0, err
	}
	return tb.c.hostMillis(), nil
}

// BatchStats reports how many batches and statements the store has sent.
func (s *Store) BatchStats() (batches, statements int64) {
	batches, statements, _ = s.acquires.Stats()
	return batches, statements
}

// SetMaxBatch sets the most statements of one batch (1: none share a
// transaction), before the store's first Acquire.
func (s *Store) SetMaxBatch(n int) { s.acquires.MaxBatch = n }

// AcquireTogether sends reqs as one batch, as the batcher sends requests
// that queued together (sorted by name), and returns their results in
// reqs' order.
func (s *Store) AcquireTogether(ctx context.Context, reqs ...leadership.Request) ([]leadership.Result, error) {
	return batchtest.SendTogether(ctx, s.acquires, reqs...)
}

// ReleaseStats reports how many batches and releases the store has sent.
func (s *Store) ReleaseStats() (batches, releases int64) {
	batches, releases, _ = s.releases.Stats()
	return batches, releases
}

// ReleaseTogether sends the releases reqs as one batch, as the batcher
// sends releases that queued together (sorted by name), and returns
// whether each ended its term, in reqs' order.
func (s *Store) ReleaseTogether(ctx context.Context, reqs ...sqlstore.Release) ([]bool, error) {
	return batchtest.SendTogether(ctx, s.releases, reqs...)
}

// SetReleaseOneByOne makes the store send each release on its own, at
// once, as before releases were batched: a test hook, for the benchmark
// that compares the two. Call it before the store's first Release.
func (s *Store) SetReleaseOneByOne() { s.releases.MaxBatch, s.releases.MaxSenders = 1, math.MaxInt }
