package leadership_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/memstore"
)

// TestHoldAtLeastKeepsTheTermAfterClose: a flag closed 5 s after it was
// raised is lowered at once but keeps its row, renewed past several
// leases, until a minute after it was raised; then it is released and a
// follower raises at once. A Close after the hold releases at once.
func TestHoldAtLeastKeepsTheTermAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		start := time.Now()
		lowered := make(chan struct{}, 1)
		a := build(t, s, "a", func(b *leadership.FlagBuilder) {
			b.HoldAtLeast(time.Minute).OnLower(func() { lowered <- struct{}{} })
		})
		b := build(t, s, "b")
		time.Sleep(5 * time.Second) // the job ran and ended
		closed := make(chan error, 1)
		go func() { closed <- a.Close() }()
		synctest.Wait()
		if a.Raised() {
			t.Fatal("a is raised during its hold, want lowered at Close")
		}
		select {
		case <-lowered:
		default:
			t.Fatal("OnLower was not called at Close")
		}
		time.Sleep(time.Minute - 5*time.Second - time.Millisecond) // just before the hold ends: 5.5 leases
		synctest.Wait()
		rows, _, _ := s.Flags(context.Background())
		if len(rows) != 1 || rows[0].Holder != "a" || rows[0].Version != 1 {
			t.Fatalf("row at the end of the hold = %+v, want held by a at version 1", rows)
		}
		if b.Raised() {
			t.Fatal("b raised during a's hold")
		}
		select {
		case err := <-closed:
			t.Fatalf("Close returned during the hold (%v)", err)
		default:
		}
		if err := b.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != time.Minute {
			t.Fatalf("b raised %v after a was, want exactly the hold, 1m0s", took)
		}
		if err := <-closed; err != nil {
			t.Fatalf("Close = %v", err)
		}
		if tok, _ := b.Token(); tok != 2 {
			t.Fatalf("b's token = %d, want 2", tok)
		}

		// A Close after the hold has passed releases at once.
		time.Sleep(2 * time.Minute)
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		c := build(t, s, "c", func(b *leadership.FlagBuilder) { b.HoldAtLeast(time.Minute) })
		if tok, ok := c.Token(); !ok || tok != 3 {
			t.Fatalf("c's token = %d, %v; want 3: b's release was not immediate", tok, ok)
		}
	})
}

// TestHoldAtLeastSkipsALostTerm: a term lost before Close (here evicted)
// is not held: Close returns at once.
func TestHoldAtLeastSkipsALostTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		a := build(t, s, "a", func(b *leadership.FlagBuilder) { b.HoldAtLeast(time.Hour) })
		if _, err := s.Evict(context.Background(), "job"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(testLease / 2) // a's renewal at Lease/3 finds the term gone
		if a.Raised() {
			t.Fatal("a still raised after a renewal since its eviction")
		}
		start := time.Now()
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 0 {
			t.Fatalf("Close of a lost term took %v, want no hold", took)
		}
	})
}
