package mysql

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"sync"
	"time"
)

// The watcher's helpers let one store follow several leading stores (other
// processes) at once: the watcher waits on the bell of one of them
// (watch.go), and a helper, on a connection of its own, waits on the bell
// of each of the others its flags wait on, up to maxFollowed bells in
// all. A helper runs while a flag of the store waits on a holder known to
// be of its bell's store; flags waiting on the stores beyond the bound
// poll.

// maxFollowed is the most leading stores a store follows at once: the
// watcher's bell and up to maxFollowed-1 helpers' (fewer on a pool capped
// below maxFollowed+2 connections, see helperRoom).
const maxFollowed = 4

// helperRoom is how many helpers the pool leaves room for beside the bell,
// the watcher and one connection for the flags' statements.
func helperRoom(db *sql.DB) int {
	n := db.Stats().MaxOpenConnections
	if n == 0 {
		return maxFollowed - 1
	}
	return max(0, min(maxFollowed-1, n-3))
}

// helpers are the watcher's helpers: the bell each waits on → how to
// stop it. One set per run of the watcher, under the store's pmu.
type helpers struct {
	ctx     context.Context // ends when the watcher stops
	cancel  context.CancelFunc
	stop    map[int64]context.CancelFunc
	kick    chan struct{}  // wakes manageHelpers
	running sync.WaitGroup // the helpers and manageHelpers, waited for when the watcher stops
}

// newHelpers returns the helpers of a watcher that runs until ctx ends,
// with manageHelpers running.
func (s *Store) newHelpers(ctx context.Context) *helpers {
	set := &helpers{stop: make(map[int64]context.CancelFunc), kick: make(chan struct{}, 1)}
	set.ctx, set.cancel = context.WithCancel(ctx)
	set.running.Go(func() { s.manageHelpers(set) })
	return set
}

// manageHelpers runs helpWith when retarget asks, until the watcher
// stops: a change of a flag costs a send on a channel, and the count over
// the store's flags in helpWith runs once for all the changes since it
// last ran.
func (s *Store) manageHelpers(set *helpers) {
	for {
		select {
		case <-set.ctx.Done():
			return
		case <-set.kick:
		}
		s.pmu.Lock()
		if s.helpers == set {
			s.helpWith()
		}
		s.pmu.Unlock()
	}
}

// helps reports whether a helper waits on the bell id. Called with s.pmu
// held.
func (s *Store) helps(id int64) bool {
	if s.helpers == nil {
		return false
	}
	_, ok := s.helpers.stop[id]
	return ok
}

// follow records id as the bell the watcher waits on (0: none) and starts
// or stops helpers accordingly. Called with s.pmu held.
func (s *Store) follow(id int64) {
	s.waitID = id
	s.helpWith()
}

// helpWith stops the helpers of bells no flag of the store waits on any
// more, and, while the watcher has a bell, starts helpers for the other
// bells its flags wait on, as room allows: of the bells not followed yet,
// those most flags wait on first. A bell followed is not given up for
// one more flags wait on. Only holders whose nameplate is known count
// (see target). Called with s.pmu held.
func (s *Store) helpWith() {
	set := s.helpers
	if set == nil {
		return
	}
	count, first := s.countByBell(s.waitedHolders())
	for id, stop := range set.stop {
		if count[id] == 0 || id == s.waitID {
			stop()
			delete(set.stop, id)
		}
	}
	if s.waitID == 0 {
		return // the watcher chooses first (target)
	}
	var wanted []int64
	for id := range count {
		if _, helped := set.stop[id]; !helped && id != s.waitID {
			wanted = append(wanted, id)
		}
	}
	slices.SortFunc(wanted, func(a, b int64) int {
		if count[a] != count[b] {
			return count[b] - count[a]
		}
		return strings.Compare(first[a], first[b])
	})
	room := helperRoom(s.db) - len(set.stop)
	for _, id := range wanted[:max(0, min(room, len(wanted)))] {
		ctx, stop := context.WithCancel(set.ctx)
		set.stop[id] = stop
		set.running.Go(func() { s.help(ctx, set, id) })
	}
}

// stopHelpers stops every helper of set and waits for them; no helper of
// set starts after it.
func (s *Store) stopHelpers(set *helpers) {
	s.pmu.Lock()
	if s.helpers == set {
		s.helpers, s.waitID = nil, 0
	}
	set.cancel() // every helper's context, and manageHelpers'
	clear(set.stop)
	s.pmu.Unlock()
	set.running.Wait()
}

// help waits on the bell of the store whose bell connection has the id
// id, on a connection of its own, until ctx ends (helpWith stopped it, or
// the watcher stopped). Each ring wakes the flags whose row became free,
// as the watcher's do (look), and ends the pause of the bell's holders. A
// bell found not held (its store closed or crashed) makes it look at the
// rows once, mark the bell's holders silent, and end (silenceBell). When
// its connection or a statement fails, the server's refusal included
// (too many connections, GET_LOCK returning NULL), it tries again on a
// new connection after 1 s, doubling up to a minute.
func (s *Store) help(ctx context.Context, set *helpers, id int64) {
	w := newWatcher(s, set)
	defer w.close()
	backoff := time.Second
	for {
		waitFor := w.waitFor
		if waitFor == 0 {
			waitFor = bellWait
		}
		err := w.connect(ctx)
		var used, got bool
		if err == nil {
			used, got, err = w.hear(ctx, id, waitFor)
		}
		if err == nil && got && used {
			s.watchRings.Add(1)
			s.pmu.Lock()
			for h, owner := range s.plates.owners {
				if owner == id {
					s.heard(h)
				}
			}
			s.pmu.Unlock()
		}
		if err == nil && got {
			err = w.look(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.close()
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Minute)
			continue
		}
		backoff = time.Second
		if got && !used {
			s.silenceBell(ctx, set, id)
			return
		}
	}
}

// silenceBell ends the helper of the bell id, found not held, and marks
// the bell's holders silent. It wakes the watcher, so that it looks their
// nameplates up again when their pause ends: by itself when it waits on
// no bell, else through a lookup on the pool (lookUpDuringWait) then; a
// helper starts again for the bell then known.
func (s *Store) silenceBell(ctx context.Context, set *helpers, id int64) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if ctx.Err() != nil {
		return // stopped meanwhile
	}
	set.stop[id]()
	delete(set.stop, id)
	var holders []string
	for h, owner := range s.plates.owners {
		if owner == id {
			holders = append(holders, h)
			s.silence(h)
		}
	}
	kick(s.watchKick)
	s.lookUpAfterPause(holders)
}
