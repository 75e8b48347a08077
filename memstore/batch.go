package memstore

import (
	"context"
	"fmt"

	"github.com/dbflag/leadership"
)

// AcquireBatch runs the acquire statements of reqs as one transaction, as
// the postgres store sends the concurrent Acquires of one Store
// (postgres/batch.go): in the order given (that store sorts them by
// name), each by the rules of [Store.Acquire], all at one instant of the
// database clock (the transaction's start), each seeing the writes of
// those before it, so two requests for one name are decided as if sent
// one after the other. The writes take effect together, when it returns.
//
// fail, if not nil, plays an error of the database in the statement of
// reqs[i] (a serialization failure, a lost connection): it is asked
// before each statement runs, and the first error it returns aborts the
// transaction, rolling back every write of the batch (Failover's history
// keeps none of them). AcquireBatch then returns that error with the
// results of the statements before reqs[i], as they would have been had
// the transaction committed: a caller must not hand them out (the
// simulation's mutant does, to show that the flags depend on it).
//
// An invalid request or an ended ctx fails the whole batch before any
// statement runs. It is safe for concurrent use with every other method.
func (s *Store) AcquireBatch(ctx context.Context, reqs []leadership.Request, fail func(i int) error) ([]leadership.Result, error) {
	for i, req := range reqs {
		if err := req.Validate(); err != nil {
			return nil, fmt.Errorf("memstore: batch request %d: %w", i, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.tx = make([]undo, 0, len(reqs))
	defer func() { s.tx = nil }()
	results := make([]leadership.Result, 0, len(reqs))
	for i, req := range reqs {
		if fail != nil {
			if err := fail(i); err != nil {
				s.rollbackLocked()
				return results, err
			}
		}
		results = append(results, s.acquireLocked(now, req))
	}
	return results, nil
}

// rollbackLocked undoes the writes of the batch running, newest first, and
// drops them from Failover's undo log, where they are the newest entries.
// s.mu is held.
func (s *Store) rollbackLocked() {
	for i := len(s.tx) - 1; i >= 0; i-- {
		s.restoreLocked(s.tx[i])
	}
	if s.history > 0 {
		s.log = s.log[:len(s.log)-len(s.tx)]
	}
	s.tx = s.tx[:0]
}
