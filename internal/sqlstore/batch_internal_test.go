package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dbflag/leadership"
)

// TestADroppedRequestGetsItsContextsError checks that a queued request
// whose context ended before its batch formed is handed its context's
// error, never an empty result without one: its caller may find both the
// done channel and the context's end ready, and an empty result would read
// as a lost term.
func TestADroppedRequestGetsItsContextsError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := &Pending{Ctx: ctx, Req: leadership.Request{Name: "dropped", Holder: "a", Lease: leadership.MinLease}, done: make(chan struct{})}
	b := &Batcher{
		Describe:   func(name string, err error) error { return fmt.Errorf("acquire %q: %w", name, err) },
		MaxSenders: 1, MaxBatch: 8,
		queue: []*Pending{p}, senders: 1,
	}
	if batch := b.take(); batch != nil {
		t.Fatalf("take = %d requests, want none: the only one was dropped", len(batch))
	}
	<-p.done
	if !errors.Is(p.err, context.Canceled) {
		t.Fatalf("dropped request: result %+v, error %v; want its context's error", p.res, p.err)
	}
}
