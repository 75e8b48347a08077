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

// Batcher sends the requests of one kind of one store in batches: the
// Acquires ([Acquires]) or the Releases ([Releases]) of the flags of the
// store that are due while another batch is on its way are sent
// together, in one transaction (so one commit, and on a networked
// database one round trip where the store can), each request with its
// own result, decided by the rules of the request alone. Nothing waits to
// fill a batch: a request is sent at once when fewer than MaxSenders
// batches are in flight, so at low load every batch holds one request,
// and batches grow with the load. The cost per flag of many flags is then
// a statement's execution, not a round trip and a commit. A request that
// finds nothing in flight and nothing queued (a lone flag, a follower
// woken by a release) is sent from its caller's goroutine, without the hop
// to a sender goroutine; requests that arrive meanwhile queue and batch as
// usual.
//
// Why an Acquire batch is as safe as a statement alone, given a Send that
// keeps its side of the contract: a flag counts its trust window from
// before it handed the request to the store, earlier than the batch's
// send; every statement of the batch reads the database clock after the
// send; the batch commits before any result is returned, and a failed
// statement rolls the whole batch back, returning the error to every
// request in it. So the statements must not fail for one row: a row that
// cannot take a new term (one at the largest version, see [Exhausted])
// loses, and only its request gets an error (Check).
// An error the client finds after the commit (a reply it cannot read) is
// returned to every request too, as a lost reply is: the requests may have
// taken effect, and each flag's next attempt learns its row.
// The requests of a batch are decided one after the other in its
// transaction, each seeing the writes of those before it, so two requests
// for one name in one batch are decided as if sent one after the other.
// Requests are sorted by name before Send, so two processes' batches lock
// rows in one order and never deadlock on them.
//
// A Release batch ends each term it names that still holds its row, and
// nothing else, as a release alone does. A batch of several releases that
// fails is sent again one release at a time (Split), so that a release
// that fails (whatever the cause) fails alone: a release may run twice,
// the second finding nothing to end. A batch that committed but whose
// reply was lost then reports false for the releases it made.
type Batcher[Req, Res any] struct {
	// Send runs the requests of batch, sorted by name, in one
	// transaction it commits before returning, and returns their results
	// in batch's order, or the error that rolled them all back.
	Send func(ctx context.Context, batch []*Pending[Req, Res]) ([]Res, error)
	// Name is the flag a request is for: batches are sorted by it.
	Name func(Req) string
	// Describe wraps the error of a request for the flag name, as the
	// store words its errors.
	Describe func(name string, err error) error
	// Check, when set, returns the error of a request from its result in
	// a batch that committed (nil: the result stands).
	Check func(Req, Res) error
	// Split sends the requests of a failed batch of several again, each
	// as a batch of its own: only for requests that may run twice.
	Split bool
	// MaxSenders is how many batches may be in flight at once; MaxBatch
	// the most requests in one batch.
	MaxSenders, MaxBatch int

	mu      sync.Mutex
	queue   []*Pending[Req, Res]
	senders int

	// Batches and requests sent, and the batches sent from their
	// caller's goroutine, for tests and figures.
	batches, statements, alone atomic.Int64
}

// Pending is one request waiting for its batch.
type Pending[Req, Res any] struct {
	Ctx  context.Context
	Req  Req
	res  Res
	err  error
	done chan struct{}
}

// The batchers of a store, and their pending requests.
type (
	// Acquires sends the Acquire calls of a store ([NewAcquires]).
	Acquires = Batcher[leadership.Request, leadership.Result]
	// Releases sends the Release calls of a store ([NewReleases]).
	Releases = Batcher[Release, bool]
	// PendingAcquire is an Acquire in a batch.
	PendingAcquire = Pending[leadership.Request, leadership.Result]
	// PendingRelease is a Release in a batch.
	PendingRelease = Pending[Release, bool]
)

// Release is a call of [leadership.Store.Release]: end the term (Holder,
// Version) of the flag Name if it still holds the row. Its result is
// whether it did.
type Release struct {
	Name, Holder string
	Version      int64
}

// DoRelease validates a call of [leadership.Store.Release] (its name and
// holder, as a request alone would be refused) and sends it through r: the
// Release of every SQL store.
func DoRelease(ctx context.Context, r *Releases, name, holder string, version int64) (bool, error) {
	if err := leadership.ValidateName("name", name); err != nil {
		return false, err
	}
	if err := leadership.ValidateName("holder", holder); err != nil {
		return false, err
	}
	return r.Do(ctx, Release{Name: name, Holder: holder, Version: version})
}

// NewAcquires returns the batcher of a store's Acquire calls: send decides
// a batch, describe words the error of a request. A request that
// [Exhausted] describes fails alone.
func NewAcquires(send func(context.Context, []*PendingAcquire) ([]leadership.Result, error),
	describe func(name string, err error) error, maxSenders, maxBatch int) *Acquires {
	return &Acquires{
		Send: send, Describe: describe, MaxSenders: maxSenders, MaxBatch: maxBatch,
		Name: func(r leadership.Request) string { return r.Name },
		Check: func(_ leadership.Request, res leadership.Result) error {
			if Exhausted(res) {
				return errExhausted
			}
			return nil
		},
	}
}

// NewReleases returns the batcher of a store's Release calls: send ends
// the terms of a batch that still hold their rows, each with the rules
// of a release alone, and reports which it ended; describe words the
// error of a request. A failed batch of several is split (see [Batcher]).
func NewReleases(send func(context.Context, []*PendingRelease) ([]bool, error),
	describe func(name string, err error) error, maxSenders, maxBatch int) *Releases {
	return &Releases{
		Send: send, Describe: describe, MaxSenders: maxSenders, MaxBatch: maxBatch,
		Name:  func(r Release) string { return r.Name },
		Split: true,
	}
}

// Stats reports how many batches and requests b has sent, and how many
// batches it sent from their caller's goroutine.
func (b *Batcher[Req, Res]) Stats() (batches, statements, alone int64) {
	return b.batches.Load(), b.statements.Load(), b.alone.Load()
}

// Do sends req at once from this goroutine when no batch is in flight
// and none queued; otherwise it queues req, starts a sender if fewer than
// MaxSenders run, and waits for req's result or ctx's end.
func (b *Batcher[Req, Res]) Do(ctx context.Context, req Req) (Res, error) {
	p := &Pending[Req, Res]{Ctx: ctx, Req: req, done: make(chan struct{})}
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
		var zero Res
		return zero, b.Describe(b.Name(req), ctx.Err())
	}
}

// sendAlone sends p as a batch of its own from the caller's goroutine,
// holding one of the MaxSenders slots, which it then hands to a sender
// goroutine if requests queued meanwhile, or gives back. The statement
// runs under p.Ctx: its cancellation cuts the statement short and the
// caller returns at once, while a queued request's statement keeps
// running for the others of its batch after its caller has returned.
// Either may still take effect; the flag's next attempt learns the row.
func (b *Batcher[Req, Res]) sendAlone(p *Pending[Req, Res]) (Res, error) {
	if err := p.Ctx.Err(); err == nil {
		b.alone.Add(1)
		b.send(p.Ctx, []*Pending[Req, Res]{p})
	} else {
		p.err = b.Describe(b.Name(p.Req), err)
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
func (b *Batcher[Req, Res]) sendBatches() {
	for {
		batch := b.take()
		if batch == nil {
			return
		}
		ctx, cancel := batchContext(batch)
		b.send(ctx, batch)
		for _, p := range batch {
			close(p.done)
		}
		cancel()
	}
}

// take removes the next batch (the oldest MaxBatch requests) from the
// queue, or returns nil and counts the calling sender out when the queue
// is empty. Requests whose context has ended are dropped, with their
// context's error.
func (b *Batcher[Req, Res]) take() []*Pending[Req, Res] {
	b.mu.Lock()
	defer b.mu.Unlock()
	var batch []*Pending[Req, Res]
	n := 0
	for _, p := range b.queue {
		switch {
		case p.Ctx.Err() != nil: // its caller returns, or has returned, its context's error
			p.err = b.Describe(b.Name(p.Req), p.Ctx.Err())
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

// send runs batch under ctx and gives each request its result or error;
// a failed batch of several is sent again one request at a time when
// Split is set, each under its own context (one whose context has ended
// gets that context's error).
func (b *Batcher[Req, Res]) send(ctx context.Context, batch []*Pending[Req, Res]) {
	b.batches.Add(1)
	b.statements.Add(int64(len(batch)))
	SortByName(batch, b.Name)
	results, err := b.Send(ctx, batch)
	if err != nil && b.Split && len(batch) > 1 {
		for _, p := range batch {
			if err := p.Ctx.Err(); err != nil {
				p.err = b.Describe(b.Name(p.Req), err)
				continue
			}
			b.send(p.Ctx, []*Pending[Req, Res]{p})
		}
		return
	}
	for i, p := range batch {
		failed := err
		if failed == nil && b.Check != nil {
			failed = b.Check(p.Req, results[i])
		}
		if failed != nil {
			p.err = b.Describe(b.Name(p.Req), failed)
		} else {
			p.res = results[i]
		}
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

// SortByName sorts batch by the name of each request, in byte order,
// keeping the order of the requests of one name: the order Send receives
// a batch in.
func SortByName[Req, Res any](batch []*Pending[Req, Res], name func(Req) string) {
	slices.SortStableFunc(batch, func(x, y *Pending[Req, Res]) int { return strings.Compare(name(x.Req), name(y.Req)) })
}

// batchContext bounds a batch by the earliest deadline of its requests;
// the end of one request's context does not cancel the others'.
func batchContext[Req, Res any](batch []*Pending[Req, Res]) (context.Context, context.CancelFunc) {
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
