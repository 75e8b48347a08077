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
	p := &PendingAcquire{Ctx: ctx, Req: leadership.Request{Name: "dropped", Holder: "a", Lease: leadership.MinLease}, done: make(chan struct{})}
	b := NewAcquires(nil, func(name string, err error) error { return fmt.Errorf("acquire %q: %w", name, err) }, 1, 8)
	b.queue, b.senders = []*PendingAcquire{p}, 1
	if batch := b.take(); batch != nil {
		t.Fatalf("take = %d requests, want none: the only one was dropped", len(batch))
	}
	<-p.done
	if !errors.Is(p.err, context.Canceled) {
		t.Fatalf("dropped request: result %+v, error %v; want its context's error", p.res, p.err)
	}
}

// TestAReleaseThatFailsItsBatchFailsAlone sends five releases as one
// batch whose Send fails while the batch holds the poisoned one: the
// batch is sent again one release at a time, so that only the poisoned
// release fails and the others are decided; a release whose context
// ended meanwhile gets its context's error instead.
func TestAReleaseThatFailsItsBatchFailsAlone(t *testing.T) {
	errPoison := errors.New("poisoned")
	sends := 0
	b := NewReleases(func(_ context.Context, batch []*PendingRelease) ([]bool, error) {
		sends++
		out := make([]bool, len(batch))
		for i, p := range batch {
			if p.Req.Name == "poison" {
				return nil, errPoison
			}
			out[i] = p.Req.Holder == "a"
		}
		return out, nil
	}, func(name string, err error) error { return fmt.Errorf("release %q: %w", name, err) }, 1, 8)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	var batch []*PendingRelease
	for _, r := range []struct {
		name, holder string
		ctx          context.Context
	}{{"x", "a", context.Background()}, {"poison", "a", context.Background()}, {"y", "b", context.Background()},
		{"z", "a", context.Background()}, {"late", "a", ended}} {
		batch = append(batch, &PendingRelease{Ctx: r.ctx, Req: Release{Name: r.name, Holder: r.holder, Version: 1}})
	}
	b.send(context.Background(), batch)
	got := map[string]string{}
	for _, p := range batch {
		got[p.Req.Name] = fmt.Sprint(p.res, " ", p.err)
	}
	want := map[string]string{
		"x": "true <nil>", "y": "false <nil>", "z": "true <nil>",
		"poison": `false release "poison": poisoned`, "late": `false release "late": context canceled`,
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %s, want %s", name, got[name], w)
		}
	}
	if sends != 5 {
		t.Errorf("%d sends, want 5: the batch, then each release alone but the one whose context ended", sends)
	}
}
