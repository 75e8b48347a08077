package sqlstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbflag/leadership"
)

// Batcher sends the Acquires of one store in batches: the acquire
// statements of the flags of the store that are due while another batch
// is on its way are sent together, in one transaction (so one commit, and
// on a networked database one round trip where the store can), each still
// the same acquire statement with its own result. Nothing waits to fill a
// batch: a statement is sent at once when fewer than MaxSenders batches are
// in flight, so at low load every batch holds one statement, and batches
// grow with the load. The cost per flag of many flags is then a
// statement's execution, not a round trip and a commit. A request that
// finds nothing in flight and nothing queued (a lone flag, a follower
// woken by a release) is sent from its caller's goroutine, without the hop
// to a sender goroutine; requests that arrive meanwhile queue and batch as
// usual.
//
// Why it is as safe as a statement alone, given a Send that keeps its
// side of the contract: a flag counts its trust window from before it
// handed the request to the store, earlier than the batch's send; every
// statement of the batch reads the database clock after the send; the
// batch commits before any result is returned, and a failed statement
// rolls the whole batch back, returning the error to every request in it.
// So the statements must not fail for one row: a row that cannot take a
// new term (one at the largest version, see [Exhausted]) loses, and only
// its request gets an error.
// An error the client finds after the commit (a reply it cannot read) is
// returned to every request too, as a lost reply is: the requests may have
// taken effect, and each flag's next attempt learns its row.
// The statements of a batch run one after the other in its transaction,
// each seeing the writes of those before it, so two requests for one name
// in one batch are decided as if sent one after the other. Requests are
// sorted by name before Send, so two processes' batches lock rows in one
// order and never deadlock on them.
type Batcher struct {
	// Send runs the acquire statements of batch, sorted by name, in one
	// transaction it commits before returning, and returns their results
	// in batch's order, or the error that rolled them all back.
	Send func(ctx context.Context, batch []*Pending) ([]leadership.Result, error)
	// Describe wraps the error of an acquire of the flag name, as the
	// store words its errors.
	Describe func(name string, err error) error
	// MaxSenders is how many batches may be in flight at once; MaxBatch
	// the most statements in one batch.
	MaxSenders, MaxBatch int

	mu      sync.Mutex
	queue   []*Pending
	senders int

	// Batches and statements sent, and the batches sent from their
	// caller's goroutine, for tests and figures.
	batches, statements, alone atomic.Int64
}

// Pending is one Acquire waiting for its batch.
type Pending struct {
	Ctx  context.Context
	Req  leadership.Request
	res  leadership.Result
	err  error
	done chan struct{}
}

// Stats reports how many batches and statements b has sent, and how many
// batches it sent from their caller's goroutine.
func (b *Batcher) Stats() (batches, statements, alone int64) {
	return b.batches.Load(), b.statements.Load(), b.alone.Load()
}

// Acquire sends req at once from this goroutine when no batch is in
// flight and none queued; otherwise it queues req, starts a sender if
// fewer than MaxSenders run, and waits for req's result or ctx's end.
func (b *Batcher) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	p := &Pending{Ctx: ctx, Req: req, done: make(chan struct{})}
	b.mu.Lock()
	if b.senders == 0 && len(b.queue) == 0 {
		b.senders++
		b.mu.Unlock()
		return b.sendAlone(p)
	}
	b.queue = append(b.queue, p)
	if b.senders < b.MaxSenders {
		b.senders++
		go b.sendBatches()
	}
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		// The batch may still take effect, as a statement whose reply
		// never arrives may; the flag's next attempt learns the row.
		return leadership.Result{}, b.Describe(req.Name, ctx.Err())
	}
}

// sendAlone sends p as a batch of its own from the caller's goroutine,
// holding one of the MaxSenders slots, which it then hands to a sender
// goroutine if requests queued meanwhile, or gives back. The statement
// runs under p.Ctx: its cancellation cuts the statement short and the
// caller returns at once, while a queued request's statement keeps
// running for the others of its batch after its caller has returned.
// Either may still take effect; the flag's next attempt learns the row.
func (b *Batcher) sendAlone(p *Pending) (leadership.Result, error) {
	if err := p.Ctx.Err(); err == nil {
		b.alone.Add(1)
		b.send(p.Ctx, []*Pending{p})
	} else {
		p.err = b.Describe(p.Req.Name, err)
	}
	b.mu.Lock()
	if len(b.queue) > 0 {
		go b.sendBatches() // keeps the slot
	} else {
		b.senders--
	}
	b.mu.Unlock()
	return p.res, p.err
}

// sendBatches sends batches until the queue is empty.
func (b *Batcher) sendBatches() {
	for {
		batch := b.take()
		if batch == nil {
			return
		}
		ctx, cancel := batchContext(batch)
		b.send(ctx, batch)
		cancel()
	}
}

// take removes the next batch (the oldest MaxBatch requests) from the
// queue, or returns nil and counts the calling sender out when the queue
// is empty. Requests whose context has ended are dropped, with their
// context's error.
func (b *Batcher) take() []*Pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	var batch []*Pending
	n := 0
	for _, p := range b.queue {
		switch {
		case p.Ctx.Err() != nil: // its caller returns, or has returned, its context's error
			p.err = b.Describe(p.Req.Name, p.Ctx.Err())
			close(p.done)
		case len(batch) < b.MaxBatch:
			batch = append(batch, p)
		default:
			b.queue[n] = p
			n++
		}
	}
	clear(b.queue[n:])
	b.queue = b.queue[:n]
	if len(batch) == 0 {
		b.senders--
		return nil
	}
	return batch
}

// send runs batch under ctx and hands each request its result.
func (b *Batcher) send(ctx context.Context, batch []*Pending) {
	b.batches.Add(1)
	b.statements.Add(int64(len(batch)))
	SortByName(batch)
	results, err := b.Send(ctx, batch)
	for i, p := range batch {
		switch {
		case err != nil:
			p.err = b.Describe(p.Req.Name, err)
		case Exhausted(results[i]):
			p.err = b.Describe(p.Req.Name, errExhausted)
		default:
			p.res = results[i]
		}
		close(p.done)
	}
}

// Exhausted reports whether res is the loss of an attempt on a free row at
// the largest version, math.MaxInt64, on which the acquire statements
// start no new term (version + 1 would overflow, and failing the
// statement would fail its whole batch): the row is free (its expiry is
// not after the statement's clock; during a hold the expiry reported is
// the hold's end) and the attempt still lost.
func Exhausted(res leadership.Result) bool {
	return !res.Acquired && res.Version == math.MaxInt64 && !res.ExpiresAt.After(res.Now)
}

// errExhausted is the error of an attempt that [Exhausted] describes.
var errExhausted = fmt.Errorf("the row is at version %d, the largest a version can hold (edited by hand?), so no new term can start on it; "+
	"a holder of its current term can still renew and release it. Set its version back to the last token actually issued "+
	"(UPDATE leadership_flags SET version = … WHERE name = …), or use another flag name", int64(math.MaxInt64))

// SortByName sorts batch by name, in byte order, keeping the order of the
// requests of one name: the order Send receives a batch in.
func SortByName(batch []*Pending) {
	slices.SortStableFunc(batch, func(x, y *Pending) int { return strings.Compare(x.Req.Name, y.Req.Name) })
}

// batchContext bounds a batch by the earliest deadline of its requests;
// the end of one request's context does not cancel the others'.
func batchContext(batch []*Pending) (context.Context, context.CancelFunc) {
	var deadline time.Time
	for _, p := range batch {
		if d, ok := p.Ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
	}
	if deadline.IsZero() {
		return context.WithCancel(context.Background())
	}
	return context.WithDeadline(context.Background(), deadline)
}
