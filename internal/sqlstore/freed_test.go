package sqlstore

import (
	"testing"

	"github.com/dbflag/leadership/internal/notify"
)

// TestWakeFreedWakesOnlyNewlyFreedRows checks which subscribers a look at
// the free rows wakes: a row free at a new version, or newly free, but not
// one free at the same version as at the last look, one still held, or a
// name nobody waits on; and every free row at the first look.
func TestWakeFreedWakesOnlyNewlyFreedRows(t *testing.T) {
	var hub notify.Hub
	chans := map[string]<-chan struct{}{}
	for _, name := range []string{"same", "newer", "newly", "held"} {
		ch, stop := hub.Subscribe(name)
		t.Cleanup(stop)
		chans[name] = ch
	}
	woken := func() map[string]bool {
		out := map[string]bool{}
		for name, ch := range chans {
			select {
			case <-ch:
				out[name] = true
			default:
			}
		}
		return out
	}
	WakeFreed(&hub, map[string]int64{"same": 3, "newer": 1}, map[string]int64{"same": 3, "newer": 2, "newly": 5, "unwatched": 1})
	if got := woken(); len(got) != 2 || !got["newer"] || !got["newly"] {
		t.Fatalf("woken %v, want newer and newly", got)
	}
	WakeFreed(&hub, nil, map[string]int64{"same": 3})
	if got := woken(); len(got) != 1 || !got["same"] {
		t.Fatalf("first look woke %v, want same, the only free row", got)
	}
}
