package mysql

import (
	"context"
	"database/sql"
	"errors"
	"testing"
)

// TestHelpersLeaveAConnectionForTheFlags checks the bound on helpers: three
// on an unlimited pool (four leading stores followed with the watcher's),
// and on a capped pool only as many as leave one connection for the flags'
// statements beside the bell and the watcher, so none below six.
func TestHelpersLeaveAConnectionForTheFlags(t *testing.T) {
	for _, c := range []struct{ maxOpen, want int }{
		{0, 3}, {2, 0}, {3, 0}, {4, 1}, {5, 2}, {6, 3}, {100, 3},
	} {
		db, err := sql.Open("mysql", "user:password@tcp(127.0.0.1:1)/db") // never connects
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(c.maxOpen)
		if got := helperRoom(db); got != c.want {
			t.Errorf("helpers on a pool of %d connections: %d, want %d", c.maxOpen, got, c.want)
		}
		db.Close()
	}
}

// TestTheWatcherReadsPausesUnderTheLock runs the watcher's choice of its
// current bell while another goroutine pauses holders, as helpers and
// lookups do: under -race, a read of the pauses outside s.pmu is reported.
func TestTheWatcherReadsPausesUnderTheLock(t *testing.T) {
	const bell = 7
	s := followingBell(t, bell)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			s.pmu.Lock()
			s.silence("other")
			delete(s.plates.silent, "other")
			s.pmu.Unlock()
		}
	}()
	w := newWatcher(s, nil)
	for range 1000 {
		w.current = bell
		if id, _, err := w.target(t.Context()); err != nil || id != bell {
			t.Fatalf("target = %d, %v; want the current bell %d", id, err, bell)
		}
	}
	<-done
}

// TestASucceededWatcherLeavesTheStoreAlone: a run of the watcher that a new
// one has succeeded (the last subscription ended and a new one began
// before it exited) does not choose a bell for the store, so that it
// cannot stop the new run's helpers or take its bell's place.
func TestASucceededWatcherLeavesTheStoreAlone(t *testing.T) {
	const bell, newBell = 7, 8
	s := followingBell(t, bell)
	old, current := &helpers{stop: map[int64]context.CancelFunc{}}, &helpers{stop: map[int64]context.CancelFunc{}}
	s.pmu.Lock()
	s.helpers, s.waitID = current, newBell
	s.pmu.Unlock()
	w := newWatcher(s, old)
	w.current = bell
	if _, _, err := w.target(t.Context()); !errors.Is(err, errStopped) {
		t.Errorf("target of a succeeded run: %v, want errStopped", err)
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if s.waitID != newBell {
		t.Errorf("after a succeeded run: the store's bell %d, want the new run's, %d", s.waitID, newBell)
	}
}

// followingBell returns a store on a pool that never connects, with a
// flag "a" waiting on the holder h, whose nameplate is known to be of the
// store whose bell connection has the id bell.
func followingBell(t *testing.T, bell int64) *Store {
	t.Helper()
	db, err := sql.Open("mysql", "user:password@tcp(127.0.0.1:1)/db") // never connects
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := New(db)
	if err != nil {
		t.Fatal(err)
	}
	_, unsubscribe := s.hub.Subscribe("a")
	t.Cleanup(unsubscribe)
	s.pmu.Lock()
	s.waitsOn = map[string]string{"a": "h"}
	s.knowledge().owners["h"] = bell
	s.pmu.Unlock()
	return s
}
