package notify_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"go.uber.org/goleak"

	"github.com/dbflag/leadership/internal/notify"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// watchers records the watchers a hub runs: which keys are being watched
// now, and every start in order.
type watchers struct {
	mu      sync.Mutex
	running map[string]int
	started []string
	// quit makes the watcher of a key return by itself at once.
	quit map[string]bool
}

func newHub(room int) (*notify.Hub, *watchers) {
	w := &watchers{running: map[string]int{}, quit: map[string]bool{}}
	h := &notify.Hub{Watch: w.watch}
	if room > 0 {
		h.Room = func() int { return room }
	}
	return h, w
}

func (w *watchers) watch(ctx context.Context, key string) {
	w.mu.Lock()
	w.running[key]++
	w.started = append(w.started, key)
	quit := w.quit[key]
	w.mu.Unlock()
	if !quit {
		<-ctx.Done()
	}
	w.mu.Lock()
	w.running[key]--
	if w.running[key] == 0 {
		delete(w.running, key)
	}
	w.mu.Unlock()
}

// now returns the keys watched, sorted, once every goroutine has settled.
func (w *watchers) now() []string {
	synctest.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	var keys []string
	for k, n := range w.running {
		if n != 1 {
			keys = append(keys, "two watchers of "+k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func want(t *testing.T, w *watchers, keys ...string) {
	t.Helper()
	if got := w.now(); !slices.Equal(got, keys) && !(len(got) == 0 && len(keys) == 0) {
		t.Fatalf("watched keys %q, want %q", got, keys)
	}
}

func TestTheFirstSubscriptionStartsTheWatcherAndTheLastOneStopsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, w := newHub(0)
		want(t, w)
		_, endA := h.Subscribe("a")
		_, endB := h.Subscribe("b")
		_, endB2 := h.Subscribe("b")
		want(t, w, "")
		endA()
		endB()
		want(t, w, "")
		endB2() // returns once the watcher has returned
		w.mu.Lock()
		running := len(w.running)
		w.mu.Unlock()
		if running != 0 {
			t.Fatal("the end of the last subscription returned before the watcher did")
		}
		_, end := h.Subscribe("c")
		want(t, w, "")
		end()
		if len(w.started) != 2 {
			t.Fatalf("watchers started: %q, want two, one per period with subscriptions", w.started)
		}
	})
}

func TestNotifyWakesTheSubscribersOfTheName(t *testing.T) {
	var h notify.Hub // the zero value: no watcher
	a, endA := h.Subscribe("a")
	b, endB := h.Subscribe("b")
	defer endA()
	defer endB()
	h.Notify("a")
	h.Notify("a") // dropped: one is pending
	select {
	case <-a:
	default:
		t.Fatal("the subscriber of a was not woken")
	}
	select {
	case <-a:
		t.Fatal("a second value was queued")
	case <-b:
		t.Fatal("the subscriber of b was woken by a's notification")
	default:
	}
}

// TestTheKeysMostNamesWaitOnAreWatchedWithinRoom: with room for two
// watchers, the two keys most names wait on are watched; a watched key is
// kept while a name waits on it, and a key no name waits on any more makes
// room for the next.
func TestTheKeysMostNamesWaitOnAreWatchedWithinRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, w := newHub(2)
		w.quit[""] = true // no watcher for names that wait on no key
		var ends []func()
		follow := func(name, key string) {
			_, end := h.Subscribe(name)
			ends = append(ends, end)
			h.Follow(name, key)
		}
		follow("a1", "a")
		want(t, w, "a")
		follow("b1", "b")
		follow("b2", "b")
		follow("c1", "c")
		follow("c2", "c")
		follow("c3", "c")
		want(t, w, "a", "b") // a is kept although c has more names
		h.Follow("a1", "")
		want(t, w, "b", "c")
		h.Follow("b1", "c")
		h.Follow("b2", "")
		want(t, w, "c")
		h.Follow("nobody", "a") // no subscription: nothing changes
		want(t, w, "c")
		for _, end := range ends {
			end()
		}
		want(t, w)
	})
}

// TestAWatcherThatReturnsByItselfStaysEnded until no name waits on its key
// and one does again.
func TestAWatcherThatReturnsByItselfStaysEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, w := newHub(0)
		w.quit["k"] = true
		starts := func() int {
			synctest.Wait()
			return len(slices.DeleteFunc(slices.Clone(w.started), func(k string) bool { return k != "k" }))
		}
		_, endA := h.Subscribe("a")
		_, endB := h.Subscribe("b")
		h.Follow("a", "k")
		h.Follow("b", "k")
		h.Follow("b", "") // a change of the names waiting
		h.Follow("b", "k")
		if n := starts(); n != 1 {
			t.Fatalf("the watcher of k started %d times while names kept waiting on it, want once", n)
		}
		h.Follow("a", "")
		h.Follow("b", "")
		h.Follow("a", "k")
		if n := starts(); n != 2 {
			t.Fatalf("the watcher of k started %d times in all, want once more when a name waits on k anew", n)
		}
		endA()
		endB()
	})
}

// TestCloseStopsTheWatchersForGood: Close returns once every watcher has
// returned, no watcher starts after it, and Notify still works.
func TestCloseStopsTheWatchersForGood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, w := newHub(0)
		a, endA := h.Subscribe("a")
		defer endA()
		h.Follow("a", "k")
		want(t, w, "k")
		h.Close()
		w.mu.Lock()
		running := len(w.running)
		w.mu.Unlock()
		if running != 0 {
			t.Fatal("Close returned before the watcher did")
		}
		_, endB := h.Subscribe("b")
		defer endB()
		h.Follow("b", "other")
		want(t, w)
		h.Notify("a")
		select {
		case <-a:
		default:
			t.Fatal("Notify after Close did not wake the subscriber")
		}
	})
}

// TestAWatcherStartsOnceThePreviousOneOfItsKeyHasReturned: a key left and
// followed again at once never has two watchers at a time.
func TestAWatcherStartsOnceThePreviousOneOfItsKeyHasReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		running, most, starts := 0, 0, 0
		release := make(chan struct{})
		h := &notify.Hub{Watch: func(ctx context.Context, key string) {
			if key == "" {
				return
			}
			mu.Lock()
			running++
			starts++
			most = max(most, running)
			mu.Unlock()
			<-ctx.Done()
			<-release // a slow exit
			mu.Lock()
			running--
			mu.Unlock()
		}}
		_, end := h.Subscribe("a")
		h.Follow("a", "k")
		synctest.Wait()
		h.Follow("a", "")
		h.Follow("a", "k")
		synctest.Wait()
		close(release)
		synctest.Wait()
		end()
		if most != 1 || starts != 2 {
			t.Fatalf("%d watchers of k started, at most %d at once; want 2, one at a time", starts, most)
		}
	})
}
