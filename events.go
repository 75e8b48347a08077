package leadership

import "sync"

// dispatcher runs callbacks one at a time, in the order posted, on one
// goroutine, so that a slow callback never blocks the flag's loop.
type dispatcher struct {
	mu      sync.Mutex
	queue   []func()
	running bool
	closed  bool
	idle    *sync.Cond
}

func newDispatcher() *dispatcher {
	d := &dispatcher{}
	d.idle = sync.NewCond(&d.mu)
	return d
}

// post queues fn; it is dropped after close.
func (d *dispatcher) post(fn func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.queue = append(d.queue, fn)
	if !d.running {
		d.running = true
		go d.drain()
	}
}

func (d *dispatcher) drain() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.queue) > 0 {
		fn := d.queue[0]
		d.queue = d.queue[1:]
		d.mu.Unlock()
		fn()
		d.mu.Lock()
	}
	d.running = false
	d.idle.Broadcast()
}

// close waits until every queued callback has returned and refuses new
// ones.
func (d *dispatcher) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for d.running {
		d.idle.Wait()
	}
}
