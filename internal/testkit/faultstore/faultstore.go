// Package faultstore wraps a leadership.Store to inject the faults of real
// deployments into tests: an unreachable database and calls that stall.
package faultstore

import (
	"context"
	"sync"
	"time"

	"github.com/dbflag/leadership"
)

// Store forwards every call to the wrapped store unless a fault is set.
// It is safe for concurrent use.
type Store struct {
	inner leadership.Store

	mu   sync.Mutex
	err  error         // when non-nil, calls fail with it without reaching inner
	hang chan struct{} // when non-nil, calls wait for it to close, then run
}

var (
	_ leadership.Store           = (*Store)(nil)
	_ leadership.ReleaseNotifier = (*Store)(nil)
)

// Wrap returns a fault-free wrapper of inner.
func Wrap(inner leadership.Store) *Store { return &Store{inner: inner} }

// Fail makes every call fail with err (an outage or a network cut) until
// Fail(nil).
func (s *Store) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// Hang stalls every call from now on, ignoring its context, as if the
// calling goroutine were frozen (GC pause, SIGSTOP) just before the
// statement reached the database. resume lets the stalled calls go on:
// their statements then run, and their replies arrive late.
func (s *Store) Hang() (resume func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	s.hang = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.hang == ch {
				s.hang = nil
			}
			s.mu.Unlock()
			close(ch)
		})
	}
}

// gate applies the current fault and returns the context to run with.
func (s *Store) gate(ctx context.Context) (context.Context, error) {
	s.mu.Lock()
	err, hang := s.err, s.hang
	s.mu.Unlock()
	if err != nil {
		return ctx, err
	}
	if hang != nil {
		<-hang
		return context.WithoutCancel(ctx), nil
	}
	return ctx, nil
}

func (s *Store) Migrate(ctx context.Context) error {
	ctx, err := s.gate(ctx)
	if err != nil {
		return err
	}
	return s.inner.Migrate(ctx)
}

func (s *Store) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	ctx, err := s.gate(ctx)
	if err != nil {
		return leadership.Result{}, err
	}
	return s.inner.Acquire(ctx, req)
}

func (s *Store) Release(ctx context.Context, name, holder string, version int64) (bool, error) {
	ctx, err := s.gate(ctx)
	if err != nil {
		return false, err
	}
	return s.inner.Release(ctx, name, holder, version)
}

func (s *Store) Evict(ctx context.Context, name string) (bool, error) {
	ctx, err := s.gate(ctx)
	if err != nil {
		return false, err
	}
	return s.inner.Evict(ctx, name)
}

func (s *Store) Flags(ctx context.Context) ([]leadership.Record, time.Time, error) {
	ctx, err := s.gate(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	return s.inner.Flags(ctx)
}

// NotifyReleases forwards to the wrapped store when it notifies; otherwise
// the channel never fires.
func (s *Store) NotifyReleases(name string) (<-chan struct{}, func()) {
	if n, ok := s.inner.(leadership.ReleaseNotifier); ok {
		return n.NotifyReleases(name)
	}
	return nil, func() {}
}

// NotifiesOtherProcesses forwards to the wrapped store (see
// [leadership.ReleaseNotifier]), so a flag on the wrapper gets the same
// default poll interval as on the store itself.
func (s *Store) NotifiesOtherProcesses() bool {
	n, ok := s.inner.(interface{ NotifiesOtherProcesses() bool })
	return ok && n.NotifiesOtherProcesses()
}
