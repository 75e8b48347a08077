package mysql

import (
	"database/sql"
	"testing"
)

// TestWaitersLeaveAConnectionForTheFlags checks the bound on waiters: four
// on an unlimited pool, and on a capped pool only as many as leave one
// connection for the flags' statements beside the bell's, so none below
// three.
func TestWaitersLeaveAConnectionForTheFlags(t *testing.T) {
	for _, c := range []struct{ maxOpen, want int }{
		{0, 4}, {1, 0}, {2, 0}, {3, 1}, {4, 2}, {5, 3}, {6, 4}, {100, 4},
	} {
		db, err := sql.Open("mysql", "user:password@tcp(127.0.0.1:1)/db") // never connects
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(c.maxOpen)
		s, err := New(db)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.waiterRoom(); got != c.want {
			t.Errorf("waiters on a pool of %d connections: %d, want %d", c.maxOpen, got, c.want)
		}
		db.Close()
	}
}

// TestABellGoroutineStartedWhileTheLastOneReturnsIsStillWoken: a store's
// bell goroutine that has decided to return (bellOn false) runs its
// cleanup after the store may have started the next one; that cleanup
// must not take the new goroutine off the process's list, or it is no
// longer woken when another store of the process lets a bell go that it
// could take.
func TestABellGoroutineStartedWhileTheLastOneReturnsIsStillWoken(t *testing.T) {
	s := &Store{bellKick: make(chan struct{}, 1)}
	other := &Store{bellKick: make(chan struct{}, 1)}
	leaveOld := enlist(s) // the goroutine returning
	leaveNew := enlist(s) // the one started meanwhile
	leaveOld()
	setBell("server/bell", other, true)
	setBell("server/bell", other, false)
	select {
	case <-s.bellKick:
	default:
		t.Fatal("the running bell goroutine was not woken when another store let its bell go")
	}
	leaveNew()
	bells.Lock()
	defer bells.Unlock()
	if _, listed := bells.stores[s]; listed {
		t.Fatal("the store is still listed after its last bell goroutine returned")
	}
}
