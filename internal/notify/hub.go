// Package notify fans release notifications out to the flags of one
// process that wait on the same flag name.
package notify

import "sync"

// Hub is a set of subscriptions by flag name. The zero value is ready to
// use; a Hub is safe for concurrent use.
type Hub struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// Subscribe returns a channel that receives a value after each Notify of
// name (values are dropped while one is pending) and a function that ends
// the subscription.
func (h *Hub) Subscribe(name string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[string]map[chan struct{}]struct{})
	}
	if h.subs[name] == nil {
		h.subs[name] = make(map[chan struct{}]struct{})
	}
	h.subs[name][ch] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.subs[name], ch)
			if len(h.subs[name]) == 0 {
				delete(h.subs, name)
			}
		})
	}
}

// Notify wakes every subscriber of name without blocking.
func (h *Hub) Notify(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[name] {
		select {
		case ch <- struct{}{}:
		default:
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
