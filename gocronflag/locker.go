package gocronflag

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dbflag/leadership"
)

// ErrLocked is returned by the locker when another scheduler holds a job's
// lock.
var ErrLocked = errors.New("gocronflag: job locked by another scheduler")

// LockPrefix starts the row name of every job lock, so locks never share a
// row with a flag.
const LockPrefix = "gocron-lock:"

// Locker is a gocron.Locker on a leadership.Store; see the package
// documentation for when to prefer the Elector. It is safe for concurrent
// use.
type Locker struct {
	store   leadership.Store
	process string
	lease   time.Duration
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a locker that takes each job's row for lease, as
// process. The lease should be shorter than the jobs' interval (so the
// next tick finds the lock free) and longer than the difference between
// the schedulers' clocks (so a late scheduler finds this tick's lock still
// held). The row is kept for at least one lease after the run starts, and
// renewed every lease/3 while the run lasts. NewLocker applies the store's
// migrations (idempotent), as FlagBuilder.Build does.
func NewLocker(ctx context.Context, store leadership.Store, process string, lease time.Duration) (*Locker, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: gocronflag.NewLocker: store is nil", leadership.ErrInvalidArgument)
	}
	if err := leadership.ValidateName("process", process); err != nil {
		return nil, err
	}
	if lease < leadership.MinLease {
		return nil, fmt.Errorf("%w: gocronflag.NewLocker: lease %v is shorter than %v", leadership.ErrInvalidArgument, lease, leadership.MinLease)
	}
	if err := store.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("gocronflag: apply migrations: %w", err)
	}
	return &Locker{store: store, process: process, lease: lease}, nil
}

// Lock implements gocron.Locker: it acquires the row of key for one lease,
// or fails with [ErrLocked] naming the holder.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	name := LockPrefix + key
	if len(name) > leadership.MaxNameLength {
		name = name[:leadership.MaxNameLength]
	}
	res, err := l.store.Acquire(ctx, leadership.Request{Name: name, Holder: l.process, Lease: l.lease})
	if err != nil {
		return nil, fmt.Errorf("gocronflag: lock %q: %w", key, err)
	}
	if !res.Acquired {
		return nil, fmt.Errorf("%w: %q held by %q until %v", ErrLocked, key, res.Holder, res.ExpiresAt)
	}
	lk := &lock{locker: l, name: name, version: res.Version, done: make(chan struct{}), stopped: make(chan struct{})}
	go lk.renew()
	return lk, nil
}

// lock renews its row while the run lasts.
type lock struct {
	locker  *Locker
	name    string
	version int64
	once    sync.Once
	done    chan struct{}
	stopped chan struct{}
}

func (lk *lock) renew() {
	defer close(lk.stopped)
	t := time.NewTicker(lk.locker.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-lk.done:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), lk.locker.lease/3)
			res, err := lk.locker.store.Acquire(ctx, leadership.Request{
				Name: lk.name, Holder: lk.locker.process, Version: lk.version, Lease: lk.locker.lease,
			})
			cancel()
			if err == nil && !res.Acquired {
				return // the lock was lost; the run cannot be stopped from here
			}
		}
	}
}

// Unlock implements gocron.Lock: it stops renewing. The row is not
// released, so it stays held for one lease after the last renewal and a
// scheduler whose clock lags cannot run the same tick again.
func (lk *lock) Unlock(context.Context) error {
	lk.once.Do(func() { close(lk.done) })
	<-lk.stopped
	return nil
}
