package mysql

import (
	"context"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
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
	w := watcher{s: s, owners: map[string]int64{holder: id}, silent: map[string]time.Time{}, pause: map[string]time.Duration{}}
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
	return sqlstore.SendTogether(ctx, s.sendBatch, reqs...)
}

// TargetAfterSilence is the bell a watcher of s chooses when it waited
// last on the bell of the store whose bell connection has the id last
// and has just found the nameplates of holders free.
func (s *Store) TargetAfterSilence(ctx context.Context, last int64, holders ...string) (int64, error) {
	w := watcher{s: s, current: last, owners: map[string]int64{}, silent: map[string]time.Time{}, pause: map[string]time.Duration{}}
	defer w.close()
	for _, h := range holders {
		w.silence(h)
	}
	id, _, err := w.target(ctx)
	return id, err
}
