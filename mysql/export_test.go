package mysql

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/batchtest"
)

// WatchStatements is the number of statements the store's watcher has
// sent, and WatchRings the number of rings it has heard.
func (s *Store) WatchStatements() int64 { return s.watchStatements.Load() }
func (s *Store) WatchRings() int64      { return s.watchRings.Load() }

// BellName is the name of the user-level lock of holder in database db.
var BellName = bellName

// WaitOnceOnBell runs one wait of a new watcher of s on the bell of the
// store whose bell connection has the id id, as the watcher does once it
// has found, from the nameplate of holder, that it is that store's.
func (s *Store) WaitOnceOnBell(ctx context.Context, holder string, id int64) error {
	w := newWatcher(s, nil)
	s.pmu.Lock()
	s.knowledge().owners[holder] = id
	s.pmu.Unlock()
	defer w.close()
	return w.wait(ctx, id)
}

// BatchStats reports how many batches and statements the store has sent.
func (s *Store) BatchStats() (batches, statements int64) {
	batches, statements, _ = s.batch.Stats()
	return batches, statements
}

// SetCallPerFlag makes the store send a batch as one CALL of
// leadership_acquire per request, as before leadership_acquire_many.
func (s *Store) SetCallPerFlag(on bool) { s.callPerFlag = on }

// AcquireTogether sends reqs as one batch, as the batcher sends requests
// that queued together (sorted by name), and returns their results in
// reqs' order.
func (s *Store) AcquireTogether(ctx context.Context, reqs ...leadership.Request) ([]leadership.Result, error) {
	return batchtest.SendTogether(ctx, s.sendBatch, reqs...)
}

// TargetAfterSilence is the bell a watcher of s chooses when it waited
// last on the bell of the store whose bell connection has the id last
// and has just found the nameplates of holders free.
func (s *Store) TargetAfterSilence(ctx context.Context, last int64, holders ...string) (int64, error) {
	w := newWatcher(s, nil)
	w.current = last
	defer w.close()
	s.silenceAll(holders)
	id, _, err := w.target(ctx)
	return id, err
}

// StoreBellName is the name of the bell of the store whose bell
// connection has the id id.
var StoreBellName = storeBellName

// WaitWithSilentHolders runs one wait of a new watcher of s on the bell
// of the store whose bell connection has the id id, having just found the
// nameplates of holders free, and calls retarget as soon as the wait has
// begun, as a flag that learns of a holder does. It reports whether
// retarget cut the wait short and how long the wait lasted; a wait still
// running after d is ended then.
func (s *Store) WaitWithSilentHolders(ctx context.Context, id int64, d time.Duration, holders ...string) (cut bool, lasted time.Duration, err error) {
	w := newWatcher(s, nil)
	defer w.close()
	s.silenceAll(holders)
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- w.wait(wctx, id) }()
	for begun := false; !begun; {
		select {
		case err = <-done: // ended before the test saw it begin (wait retargets at its start)
			return errors.Is(err, errRetarget), time.Since(start), ignoreErr(err, errRetarget)
		case <-time.After(time.Millisecond):
		}
		s.pmu.Lock()
		if begun = s.waitCancel != nil; begun {
			s.retarget()
		}
		s.pmu.Unlock()
	}
	err = <-done
	if errors.Is(err, errRetarget) {
		return true, time.Since(start), nil
	}
	if wctx.Err() != nil {
		err = nil // ended at d
	}
	return false, time.Since(start), err
}

// ignoreErr is err, or nil when it is target.
func ignoreErr(err, target error) error {
	if errors.Is(err, target) {
		return nil
	}
	return err
}

// silenceAll marks holders silent, as when their nameplates were found
// free.
func (s *Store) silenceAll(holders []string) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	for _, h := range holders {
		s.silence(h)
	}
}

// FollowedBells is the bells the store's watcher and helpers wait on, by
// the connection id of their stores' bells: the watcher's first (0 when
// it has none), then the helpers' in increasing order.
func (s *Store) FollowedBells() []int64 {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	bells := []int64{s.waitID}
	if s.helpers != nil {
		bells = append(bells, slices.Sorted(maps.Keys(s.helpers.stop))...)
	}
	return bells
}
