package gocronflag

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

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

// Lock implements gocron.Locker: it acquires the row [LockName](key) for
// one lease, or fails with [ErrLocked] naming the holder.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	name := LockName(key)
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

// hashMark separates the readable part of a hashed lock name from the
// SHA-256 of the job name.
const hashMark = "~sha256:"

// LockName returns the row a job's lock takes: [LockPrefix] followed by the
// job name when that is a valid row name ([leadership.ValidateName]: at
// most [leadership.MaxNameLength] bytes in all, valid UTF-8, no control
// characters, no space at either end), so short names keep the rows they
// always had. Any other job name maps to [LockPrefix], a readable start of
// the name cut at a character boundary, "~sha256:" and the SHA-256 of the
// whole name in hex, so distinct job names never share a row (a short
// name that itself ends in "~sha256:" and 64 hex digits is hashed too).
func LockName(key string) string {
	name := LockPrefix + key
	if leadership.ValidateName("lock", name) == nil && !looksHashed(key) {
		return name
	}
	sum := sha256.Sum256([]byte(key))
	suffix := hashMark + hex.EncodeToString(sum[:])
	room := leadership.MaxNameLength - len(LockPrefix) - len(suffix)
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(key, "?") {
		if unicode.IsControl(r) {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > room {
			break
		}
		b.WriteRune(r)
	}
	return LockPrefix + b.String() + suffix
}

// looksHashed reports whether key ends as a hashed lock name does.
func looksHashed(key string) bool {
	i := strings.LastIndex(key, hashMark)
	if i < 0 || len(key)-i-len(hashMark) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(key[i+len(hashMark):])
	return err == nil
}
