package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// Batching. The acquire statements of the flags of one Store that are due
// while another batch is on its way are sent together, as one pgx batch:
// one round trip and one implicit transaction (so one commit) for all of
// them, each still the same acquire statement with its own result. Nothing
// waits to fill a batch: a statement is sent at once when fewer than
// maxSenders batches are in flight, so at low load every batch holds one
// statement, and batches grow with the load. The cost per flag of many flags
// is then a statement's execution, not a round trip and a commit. A request
// that finds nothing in flight and nothing queued (a lone flag, a
// follower woken by a release) is sent from its caller's goroutine, without
// the hop to a sender goroutine; requests that arrive meanwhile queue and
// batch as usual.
//
// Why it is as safe as a statement alone: a flag counts its trust window
// from before it handed the request to the store, earlier than the batch's
// send; every statement of the batch reads the database clock at the
// transaction's start, after the send; the batch commits before any result
// is returned (the session must be idle afterwards, see committed), and a
// failed statement rolls the whole batch back, returning the error to
// every request in it. The statements of a batch run one after the other
// in its transaction, each seeing the writes of those before it, so two
// requests for one name in one batch are decided as if sent one after the
// other. Statements are ordered by name, so two processes' batches lock
// rows in one order and never deadlock on them.
const (
	// maxSenders is how many batches of one Store may be in flight at once.
	maxSenders = 2
	// maxBatch is the most statements in one batch.
	maxBatch = 512
)

// pending is one Acquire waiting for its batch.
type pending struct {
	ctx    context.Context
	req    leadership.Request
	micros int64
	res    leadership.Result
	err    error
	done   chan struct{}
}

// batcher queues the Acquires of one Store and sends them in batches.
type batcher struct {
	mu      sync.Mutex
	queue   []*pending
	senders int

	// Batches and statements sent, and the batches sent from their
	// caller's goroutine (sendAlone), for tests and figures.
	batches, statements, alone atomic.Int64
}

// batchAcquire sends p at once from this goroutine when no batch is in
// flight and none queued (sendAlone); otherwise it queues p, starts a
// sender if fewer than maxSenders run, and waits for p's result or p.ctx's
// end.
func (s *Store) batchAcquire(p *pending) (leadership.Result, error) {
	b := &s.batch
	b.mu.Lock()
	if b.senders == 0 && len(b.queue) == 0 {
		b.senders++
		b.mu.Unlock()
		return s.sendAlone(p)
	}
	b.queue = append(b.queue, p)
	if b.senders < maxSenders {
		b.senders++
		go s.sendBatches()
	}
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.res, p.err
	case <-p.ctx.Done():
		// The batch may still take effect, as a statement whose reply
		// never arrives may; the flag's next attempt learns the row.
		return leadership.Result{}, describe("acquire "+sqlstore.Quote(p.req.Name), p.ctx.Err())
	}
}

// sendAlone sends p as a batch of its own from the caller's goroutine,
// holding one of the maxSenders slots, which it then hands to a sender
// goroutine if requests queued meanwhile, or gives back. The statement
// runs under p.ctx, as any pgx call: its cancellation cuts the statement
// short (pgx then closes the connection) and the caller returns at once,
// while a queued request's statement keeps running for the others of its
// batch after its caller has returned. Either may still take effect; the
// flag's next attempt learns the row.
func (s *Store) sendAlone(p *pending) (leadership.Result, error) {
	b := &s.batch
	if err := p.ctx.Err(); err == nil {
		b.alone.Add(1)
		s.send(p.ctx, []*pending{p})
	} else {
		p.err = describe("acquire "+sqlstore.Quote(p.req.Name), err)
	}
	b.mu.Lock()
	if len(b.queue) > 0 {
		go s.sendBatches() // keeps the slot
	} else {
		b.senders--
	}
	b.mu.Unlock()
	return p.res, p.err
}

// sendBatches sends batches until the queue is empty.
func (s *Store) sendBatches() {
	for {
		batch := s.batch.take()
		if batch == nil {
			return
		}
		ctx, cancel := batchContext(batch)
		s.send(ctx, batch)
		cancel()
	}
}

// take removes the next batch (the oldest maxBatch requests) from the
// queue, or returns nil and counts the calling sender out when the queue
// is empty. Requests whose context has ended are dropped.
func (b *batcher) take() []*pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	var batch []*pending
	n := 0
	for _, p := range b.queue {
		switch {
		case p.ctx.Err() != nil: // its caller returns, or has returned, its context's error
			p.err = describe("acquire "+sqlstore.Quote(p.req.Name), p.ctx.Err())
			close(p.done)
		case len(batch) < maxBatch:
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
func (s *Store) send(ctx context.Context, batch []*pending) {
	s.batch.batches.Add(1)
	s.batch.statements.Add(int64(len(batch)))
	slices.SortStableFunc(batch, func(a, b *pending) int { return strings.Compare(a.req.Name, b.req.Name) })
	results := make([]leadership.Result, len(batch))
	err := sqlstore.RetryOnce(ctx, transient, func() error {
		return s.committed(ctx, func(conn *pgx.Conn) error {
			if len(batch) == 1 { // the same statement, without a batch's framing
				return scanAcquire(conn.QueryRow(ctx, acquireSQL, acquireArgs(batch[0])...), batch[0].req.Name, &results[0])
			}
			var b pgx.Batch
			for _, p := range batch {
				b.Queue(acquireSQL, acquireArgs(p)...)
			}
			br := conn.SendBatch(ctx, &b)
			for i, p := range batch {
				if err := scanAcquire(br.QueryRow(), p.req.Name, &results[i]); err != nil {
					br.Close()
					return err
				}
			}
			return br.Close()
		})
	})
	for i, p := range batch {
		if err != nil {
			p.err = describe("acquire "+sqlstore.Quote(p.req.Name), err)
		} else {
			p.res = results[i]
		}
		close(p.done)
	}
}

// batchContext bounds a batch by the earliest deadline of its requests;
// the end of one request's context does not cancel the others'.
func batchContext(batch []*pending) (context.Context, context.CancelFunc) {
	var deadline time.Time
	for _, p := range batch {
		if d, ok := p.ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
	}
	if deadline.IsZero() {
		return context.WithCancel(context.Background())
	}
	return context.WithDeadline(context.Background(), deadline)
}

func acquireArgs(p *pending) []any {
	return []any{p.req.Name, p.req.Holder, p.req.Version, p.micros}
}

// scanAcquire reads the result of one acquire statement into res.
func scanAcquire(row pgx.Row, name string, res *leadership.Result) error {
	*res = leadership.Result{Record: leadership.Record{Name: name}}
	err := row.Scan(&res.Acquired, &res.Holder, &res.Version, &res.RenewedAt, &res.ExpiresAt, &res.Now)
	if errors.Is(err, pgx.ErrNoRows) {
		// The row was inserted by a concurrent statement after ours
		// began: we lost, and its content is not visible to us yet.
		// Zero instants make the follower retry soon.
		*res = leadership.Result{Record: leadership.Record{Name: name}}
		return nil
	}
	return err
}
