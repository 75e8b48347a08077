// Package notify fans release notifications out to the flags of one store
// that wait on the same flag name, and runs the store's watchers, which
// carry the releases of other processes, while flags wait.
package notify

import (
	"context"
	"sync"
)

// Hub is a set of subscriptions by flag name and the watchers that serve
// them. Each subscribed name waits on a key, "" until [Hub.Follow] says
// otherwise: the postgres and sqlite stores leave every name on "" (one
// watcher, their listener or file watcher, serves them all); the mysql
// store moves a name to the holder its flag lost to (one watcher per
// holder followed). The first subscription that waits on a key starts
// the store's watcher of that key; when no subscription waits on it any
// more, the watcher's context ends; the end of the last subscription
// waits for every watcher to return.
//
// Set Watch and Room before the first Subscribe; the zero value runs no
// watcher (a store whose releases only wake flags of the same process).
// A Hub is safe for concurrent use.
type Hub struct {
	// Watch is the store's wait on key: it wakes subscriptions (Notify)
	// for releases by other processes until ctx ends. A Watch that
	// returns by itself is not run again for its key until no
	// subscription waits on the key and one does again. A watcher for a
	// key never starts before the previous watcher of that key has
	// returned.
	Watch func(ctx context.Context, key string)
	// Room, when set, bounds how many keys are watched at once: of the
	// keys not watched, those most names wait on are watched first
	// (the first by key on a tie); a watched key is not given up for one
	// that more names wait on.
	Room func() int

	mu     sync.Mutex
	subs   map[string]*sub // by flag name
	keys   map[string]*key
	closed bool
}

type sub struct {
	chans map[chan struct{}]struct{}
	key   string
}

// key is the state of one key: how many names wait on it, and its
// watcher.
type key struct {
	names int
	stop  context.CancelFunc // non-nil while its watcher is wanted
	done  chan struct{}      // closed when its last watcher has returned
	ended bool               // its watcher returned by itself
}

// Subscribe returns a channel that receives a value after each Notify of
// name (values are dropped while one is pending) and a function that ends
// the subscription. The end of the last subscription of the hub waits
// for its watchers to return.
func (h *Hub) Subscribe(name string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs, h.keys = make(map[string]*sub), make(map[string]*key)
	}
	s := h.subs[name]
	if s == nil {
		s = &sub{chans: make(map[chan struct{}]struct{})}
		h.subs[name] = s
		h.count("", +1)
	}
	s.chans[ch] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return ch, func() { once.Do(func() { h.unsubscribe(name, ch) }) }
}

func (h *Hub) unsubscribe(name string, ch chan struct{}) {
	h.mu.Lock()
	s := h.subs[name]
	delete(s.chans, ch)
	if len(s.chans) == 0 {
		delete(h.subs, name)
		h.count(s.key, -1)
	}
	var wait []chan struct{}
	if len(h.subs) == 0 {
		for _, k := range h.keys {
			wait = append(wait, k.done)
		}
	}
	h.mu.Unlock()
	for _, done := range wait {
		if done != nil {
			<-done
		}
	}
}

// Follow moves the subscriptions of name to key: from now on they need
// the watcher of key. It does nothing when name has no subscription.
func (h *Hub) Follow(name, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[name]
	if s == nil || s.key == key {
		return
	}
	h.count(s.key, -1)
	s.key = key
	h.count(key, +1)
}

// count adds n to the names waiting on name's key k, and starts and
// stops watchers accordingly. Called with h.mu held.
func (h *Hub) count(k string, n int) {
	st := h.keys[k]
	if st == nil {
		st = &key{}
		h.keys[k] = st
	}
	st.names += n
	if st.names == 0 {
		st.ended = false
		if st.stop == nil && st.done == nil {
			delete(h.keys, k)
		}
	}
	h.balance()
}

// balance stops the watchers of keys no name waits on, and starts those
// of the keys most names wait on, as Room allows. Called with h.mu held.
func (h *Hub) balance() {
	if h.Watch == nil {
		return
	}
	running := 0
	for _, k := range h.keys {
		if k.stop != nil && (k.names == 0 || h.closed) {
			k.stop()
			k.stop = nil
		}
		if k.stop != nil {
			running++
		}
	}
	room := int(^uint(0) >> 1)
	if h.Room != nil {
		room = h.Room()
	}
	for ; running < room && !h.closed; running++ {
		best := ""
		var bestKey *key
		for name, k := range h.keys {
			if k.names == 0 || k.stop != nil || k.ended {
				continue
			}
			if bestKey == nil || k.names > bestKey.names || k.names == bestKey.names && name < best {
				best, bestKey = name, k
			}
		}
		if bestKey == nil {
			return
		}
		h.start(best, bestKey)
	}
}

// start runs the watcher of key k, once the previous one has returned.
// Called with h.mu held.
func (h *Hub) start(name string, k *key) {
	ctx, stop := context.WithCancel(context.Background())
	prev, done := k.done, make(chan struct{})
	k.stop, k.done = stop, done
	go func() {
		if prev != nil {
			<-prev
		}
		h.Watch(ctx, name)
		stop()
		h.mu.Lock()
		defer h.mu.Unlock()
		close(done)
		if k.done != done {
			return // a newer watcher of the key waits for this one
		}
		k.done = nil
		if k.stop != nil { // returned by itself
			k.stop, k.ended = nil, true
		}
		if k.names == 0 {
			delete(h.keys, name)
		}
		h.balance()
	}()
}

// Close stops every watcher for good and waits for them to return; the
// subscriptions keep receiving Notify.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	h.balance()
	var wait []chan struct{}
	for _, k := range h.keys {
		if k.done != nil {
			wait = append(wait, k.done)
		}
	}
	h.mu.Unlock()
	for _, done := range wait {
		<-done
	}
}

// Notify wakes every subscriber of name without blocking.
func (h *Hub) Notify(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.subs[name]; s != nil {
		for ch := range s.chans {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// Names returns the names that have subscribers.
func (h *Hub) Names() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := make([]string, 0, len(h.subs))
	for n := range h.subs {
		names = append(names, n)
	}
	return names
}
