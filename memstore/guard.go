package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/dbflag/leadership"
)

// The failover guard of docs/failover.md. The store plays one database
// server whose incarnation starts at 1 and changes at each [Store.Failover];
// the guard record and the rules of the acquire statement are those of the
// postgres and mysql stores, so the simulation and the storetest suite can
// check the design on it.
//
// Two of those rules close holes that the simulation found in a first
// draft of docs/failover.md (sim_test.go's mutants show them):
//
// Migrate writes the guard record's incarnation, as the creation of a
// schema would. Under the rules alone
// the record keeps the incarnation '' until the first acquire statement,
// and a failover that loses that statement (and every one after it)
// brings back '', which rule 1 takes for a fresh schema: no hold and no
// floor, so the next first acquisition gets version 1 again while the lost
// term's holder may still trust its version 1 (the simulation's mutant
// "guard-without-migrate" finds it).
//
// An expired row whose version is below the version floor (its term began
// under an earlier incarnation) is not renewed, not even after the hold:
// its holder's request is treated as any request for an expired row, so
// it gets a new term at a version at least the floor (rule 5), which the
// flag takes for a new term. Under rule 4 alone the holder renews it after
// the hold and raises its old token, although a successor with a higher
// token may have been raised in the lost commits: the token goes backwards
// and a resource fenced by the successor's token refuses the renewed
// holder for as long as it keeps renewing (the simulation's mutant
// "guard-renews-lost-terms" finds it). Under the first incarnation the
// floor is 0 and nothing changes.

// guard is the schema-wide guard record (leadership_guard).
type guard struct {
	incarnation int           // that last wrote the record; 0 stands for '' (no acquire yet)
	holdUntil   time.Time     // no new term starts before this instant
	floor       int64         // the lowest version a new term may get
	maxLease    time.Duration // the longest lease any acquire statement asked for
}

var _ leadership.Quarantiner = (*Store)(nil)

// WithHistory keeps an undo log of the writes of the last d (by the store's
// clock) so that [Store.Failover] can lose them. Without it the store keeps
// no history and Failover can lose nothing. The log holds one entry per
// write made in the last d.
func WithHistory(d time.Duration) Option { return func(s *Store) { s.history = d } }

// WithoutGuardForTest turns the failover guard off, for tests that show
// what the guard prevents (the simulation's mutant): acquire statements
// then ignore the incarnation and the guard record, as a store without the
// guard would. Never use it elsewhere: a failover that loses commits can
// then give two processes the flag at once, or one token to two terms.
func WithoutGuardForTest() Option { return func(s *Store) { s.noGuard = true } }

// WithDraftRenewalRuleForTest makes the guard renew an expired term that
// began under an earlier incarnation once the hold is over, as rule 4 of
// docs/failover.md words it, for the simulation's mutant that shows why
// the store does not (see the top of guard.go). Never use it elsewhere.
func WithDraftRenewalRuleForTest() Option { return func(s *Store) { s.draftRenewal = true } }

// lostTermLocked reports whether row's term began under an earlier
// incarnation, whose commits may have been lost: then an expired row may
// hide a successor's term. s.mu is held.
func (s *Store) lostTermLocked(row leadership.Record) bool {
	return !s.noGuard && !s.draftRenewal && row.Version < s.guard.floor
}

// undo is one entry of the undo log: the state before one write.
type undo struct {
	at     time.Time // database clock at the write
	guard  bool      // the write changed the guard record, which was prev
	prev   guard
	name   string // else it changed this row,
	row    leadership.Record
	exists bool // which existed before as row
}

// Failover simulates the database losing its latest acknowledged commits
// and a new server incarnation taking over, as after a failover to an
// asynchronous replica or a crash that loses the tail of the log:
//
//   - every write of the last lose (rows and the guard record alike, by
//     the database clock) is undone, newest first, leaving the state the
//     store had at an earlier point; lose = 0 loses nothing, as a crash
//     recovery or a promotion of a synchronous replica would;
//   - the store starts a new incarnation, which the next acquire statement
//     notices (rule 1 of docs/failover.md);
//   - the database clock moves by clockOffset from then on (the new
//     server's clock; negative when it is behind). docs/failover.md's
//     assumption C bounds a backward offset by the time since the last
//     commit the new server lacks; the store does not check it.
//
// It fails, changing nothing, when lose > 0 reaches further back than the
// history kept ([WithHistory]). Flags, Release and Evict see the rolled
// back rows at once. Failover is safe for concurrent use with every other
// method: it runs between two statements.
func (s *Store) Failover(lose, clockOffset time.Duration) error {
	if lose < 0 {
		return fmt.Errorf("%w: memstore: Failover loses %v, a negative duration", leadership.ErrInvalidArgument, lose)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if lose > 0 {
		if lose > s.history {
			return fmt.Errorf("%w: memstore: Failover cannot lose %v of writes: the store keeps %v of history (set it with WithHistory)",
				leadership.ErrInvalidArgument, lose, s.history)
		}
		cutoff := s.now().Add(-lose)
		for len(s.log) > s.head {
			u := s.log[len(s.log)-1]
			if !u.at.After(cutoff) {
				break
			}
			s.log = s.log[:len(s.log)-1]
			s.restoreLocked(u)
		}
	}
	s.incarnation++
	s.offset += clockOffset
	return nil
}

// restoreLocked puts back the state that u recorded. s.mu is held.
func (s *Store) restoreLocked(u undo) {
	switch {
	case u.guard:
		s.guard = u.prev
	case u.exists:
		s.rows[u.name] = u.row
	default:
		delete(s.rows, u.name)
	}
}

// Quarantine implements [leadership.Quarantiner]: no new term starts before
// database-now + d, nor before the end of a longer hold in force.
func (s *Store) Quarantine(ctx context.Context, d time.Duration) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, fmt.Errorf("%w: memstore: quarantine for %v: the duration must be positive", leadership.ErrInvalidArgument, d)
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if until := now.Add(d); until.After(s.guard.holdUntil) {
		g := s.guard
		g.holdUntil = until
		s.setGuard(now, g)
	}
	return s.guard.holdUntil, nil
}

// QuarantinedUntil implements [leadership.Quarantiner]: the end of the hold
// in the guard record (the zero time when there never was one) and the
// database clock.
func (s *Store) QuarantinedUntil(ctx context.Context) (until, now time.Time, err error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.guard.holdUntil, s.now(), nil
}

// noticeLocked applies rules 1 and 2 of docs/failover.md for an acquire
// statement at now with lease: a new incarnation starts a hold of the
// longest lease and raises the version floor; the longest lease grows. It
// reports whether a new term is held back (rule 3). s.mu is held.
func (s *Store) noticeLocked(now time.Time, lease time.Duration) (held bool) {
	if s.noGuard {
		return false
	}
	g := s.guard
	if g.incarnation != s.incarnation {
		if g.incarnation != 0 { // a schema that saw an earlier incarnation
			g.holdUntil = later(g.holdUntil, now.Add(max(g.maxLease, lease)))
			g.floor = max(g.floor, now.UnixMicro())
		}
		g.incarnation = s.incarnation
	}
	g.maxLease = max(g.maxLease, lease)
	if g != s.guard {
		s.setGuard(now, g)
	}
	return now.Before(g.holdUntil)
}

// setGuard writes the guard record, logging its former state. s.mu is held.
func (s *Store) setGuard(now time.Time, g guard) {
	s.undoLocked(now, undo{guard: true, prev: s.guard})
	s.guard = g
}

// putLocked writes a row, logging its former state. s.mu is held.
func (s *Store) putLocked(now time.Time, row leadership.Record) {
	prev, exists := s.rows[row.Name]
	s.undoLocked(now, undo{name: row.Name, row: prev, exists: exists})
	s.rows[row.Name] = row
}

// undoLocked records the state before a write: in the undo log of
// Failover, and in the transaction's own log while a batch runs
// (batch.go). s.mu is held.
func (s *Store) undoLocked(now time.Time, u undo) {
	if s.tx != nil {
		s.tx = append(s.tx, u)
	}
	s.logLocked(now, u)
}

// logLocked appends an undo entry, dropping those older than the history
// kept. s.mu is held.
func (s *Store) logLocked(now time.Time, u undo) {
	if s.history <= 0 {
		return
	}
	u.at = now
	for s.head < len(s.log) && s.log[s.head].at.Before(now.Add(-s.history)) {
		s.log[s.head] = undo{}
		s.head++
	}
	if s.head > len(s.log)/2 { // compact in amortised constant time
		s.log = append(s.log[:0], s.log[s.head:]...)
		s.head = 0
	}
	s.log = append(s.log, u)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
