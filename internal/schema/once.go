package schema

import (
	"context"
	"sync"
	"sync/atomic"
)

// Once runs a store's migrations until they succeed once, so that building
// many flags on one store migrates once: golang-migrate's lock and queries
// cost more than the flag's own first attempt, and behind a pooler in
// transaction mode its session-level lock can be orphaned. Failures are
// not remembered: the next call tries again. The zero value is ready to
// use; a Once is safe for concurrent use, and a caller waiting for another
// caller's attempt gives up when its context ends.
type Once struct {
	mu   sync.Mutex
	sem  chan struct{} // holds a token while an attempt runs; made on first use
	done atomic.Bool
}

// Do runs fn unless a call of fn through o has succeeded, one call at a
// time.
func (o *Once) Do(ctx context.Context, fn func(context.Context) error) error {
	if o.done.Load() {
		return nil
	}
	sem := o.semaphore()
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-sem }()
	if o.done.Load() {
		return nil
	}
	if err := fn(ctx); err != nil {
		return err
	}
	o.done.Store(true)
	return nil
}

func (o *Once) semaphore() chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sem == nil {
		o.sem = make(chan struct{}, 1)
	}
	return o.sem
}
