// Package memstore is an in-memory [leadership.Store] for tests of code that
// uses flags and for simulations of the algorithm. It obeys the same
// contract as the database stores (package storetest checks it), with the
// process's own clock as "the database clock". Flags share leadership only
// when they use the same *Store, so it is no substitute for a database
// between processes.
//
// It also implements the failover guard of docs/failover.md and
// [leadership.Quarantiner], and can simulate a failover that loses
// acknowledged commits ([Store.Failover], [WithHistory]). Until the first
// Failover or Quarantine the guard never holds anything back, so the store
// then behaves as one without it.
package memstore

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/notify"
)

// Store keeps flag rows in a map guarded by a mutex. The zero value is not
// usable; call New.
type Store struct {
	mu    sync.Mutex
	rows  map[string]leadership.Record
	clock func() time.Time
	hub   notify.Hub

	// The failover guard (guard.go).
	guard        guard
	incarnation  int           // the server's, from 1
	offset       time.Duration // of the current server's clock from clock
	noGuard      bool
	draftRenewal bool
	history      time.Duration
	log          []undo // the undo log, oldest first, from log[head]
	head         int
	tx           []undo // the writes of the batch running, oldest first; nil outside one (batch.go)
}

var (
	_ leadership.Store           = (*Store)(nil)
	_ leadership.ReleaseNotifier = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock that plays the database clock; default
// time.Now (which testing/synctest makes virtual).
// After [Store.Failover] the database clock is this clock plus the
// failovers' clock offsets.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.clock = now } }

// New returns an empty store, at incarnation 1.
func New(opts ...Option) *Store {
	s := &Store{rows: make(map[string]leadership.Record), clock: time.Now, incarnation: 1}
	for _, o := range opts {
		o(s)
	}
	return s
}

// now is the database clock.
func (s *Store) now() time.Time { return s.clock().Add(s.offset) }

// Migrate creates no tables (there is no schema), but, like the creation
// of a schema, it writes the guard record with the current incarnation
// when no statement has written it yet, so that a later failover that
// loses the first acquisitions is noticed (see guard.go). Without Migrate
// the first acquire statement writes the record, as docs/failover.md has
// it.
func (s *Store) Migrate(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.guard.incarnation == 0 && !s.noGuard {
		g := s.guard
		g.incarnation = s.incarnation
		s.setGuard(s.now(), g)
	}
	return nil
}

// Acquire implements [leadership.Store.Acquire], with the guard of
// docs/failover.md: after a new incarnation, or during a [Store.Quarantine],
// no new term starts before the hold ends and an expired term is not
// renewed; a new term's version is at least the guard's version floor; a
// losing result reports the expiry raised to the hold's end.
func (s *Store) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	if err := req.Validate(); err != nil {
		return leadership.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return leadership.Result{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acquireLocked(s.now(), req), nil
}

// acquireLocked decides and writes req at the database instant now. s.mu
// is held.
func (s *Store) acquireLocked(now time.Time, req leadership.Request) leadership.Result {
	held := s.noticeLocked(now, req.Lease)
	row, exists := s.rows[req.Name]
	free := !exists || !row.ExpiresAt.After(now)
	own := exists && req.Version > 0 && row.Holder == req.Holder && row.Version == req.Version &&
		!(free && s.lostTermLocked(row)) // an expired term of an earlier incarnation may hide a lost successor
	switch {
	case own && !(held && free): // rule 4: while held, only an unexpired term renews
	case free && !held: // rule 5: a new term
		row.Version = max(row.Version+1, s.guard.floor)
	default: // rule 6
		if !exists {
			row = leadership.Record{Name: req.Name}
		}
		if held {
			row.ExpiresAt = later(row.ExpiresAt, s.guard.holdUntil)
		}
		return leadership.Result{Record: row, Now: now}
	}
	row.Name, row.Holder = req.Name, req.Holder
	row.RenewedAt, row.ExpiresAt = now, now.Add(req.Lease)
	s.putLocked(now, row)
	return leadership.Result{Record: row, Acquired: true, Now: now}
}

// Release implements [leadership.Store.Release].
func (s *Store) Release(ctx context.Context, name, holder string, version int64) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	row, ok := s.rows[name]
	ok = ok && row.Holder == holder && row.Holder != "" && row.Version == version
	if ok {
		now := s.now()
		row.Holder = ""
		if row.ExpiresAt.After(now) {
			row.ExpiresAt = now
		}
		s.putLocked(now, row)
	}
	s.mu.Unlock()
	if ok {
		s.hub.Notify(name)
	}
	return ok, nil
}

// Evict implements [leadership.Store.Evict].
func (s *Store) Evict(ctx context.Context, name string) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	row, ok := s.rows[name]
	ok = ok && row.Holder != ""
	if ok {
		row.Holder = ""
		s.putLocked(s.now(), row)
	}
	s.mu.Unlock()
	if ok {
		s.hub.Notify(name)
	}
	return ok, nil
}

// Flags implements [leadership.Store.Flags].
func (s *Store) Flags(ctx context.Context) ([]leadership.Record, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rows := make([]leadership.Record, 0, len(s.rows))
	for _, r := range s.rows {
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b leadership.Record) int { return strings.Compare(a.Name, b.Name) })
	return rows, s.now(), nil
}

// NotifyReleases implements [leadership.ReleaseNotifier] for flags on this
// store.
func (s *Store) NotifyReleases(name string) (<-chan struct{}, func()) {
	return s.hub.Subscribe(name)
}
