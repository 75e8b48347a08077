package leadership_test

// The simulation's batched path (see sim_test.go): in batch mode each
// process runs several flags (one per name, sometimes two of one name) on
// one Store whose concurrent Acquires go out as the postgres store sends
// them (postgres/batch.go): queued, at most simMaxSenders batches in
// flight, up to simMaxBatch statements each, sorted by name, run as one
// transaction at one database instant (memstore.Store.AcquireBatch), all
// committed together or none. The adversary acts on a batch as a whole:
// latency, a stall in flight (longer than leases) before or after the
// commit, an outage, a failure before it runs, a failed statement that
// rolls the batch back (sometimes retried once, as a transient error is),
// a lost reply after the commit; and on each member, a pause of its
// goroutine after the reply.
//
// To keep a schedule a function of its seed, a batch is formed at the
// first multiple of simBatchTick after the request that wakes the
// dispatcher (so every request of that instant joins it, whatever order
// their goroutines ran in), the queue is ordered by instant and flag rather than by arrival,
// and the dispatcher draws each batch's fate and its members' pauses
// before the batch leaves.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

const (
	simMaxSenders = 2   // postgres/batch.go maxSenders
	simMaxBatch   = 512 // postgres/batch.go maxBatch
	// simBatchTick is the grid of instants at which batches form.
	simBatchTick = 10 * time.Microsecond
	// simBatchSchedules is the default number of batched schedules, each
	// with about three times the flags of a schedule of TestSimulation
	// and five times its cost; the long mode runs more.
	simBatchSchedules = 60
)

// The batched path's mutants: each breaks a per-row rule only when
// Acquires go out in batches.
const (
	// The statements run sorted by name but the results are handed back
	// in the queue's order: a flag gets another name's result.
	mutantBatchUnsorted = "batch-results-in-queue-order"
	// A flag gets its statement's result as soon as the statement ran,
	// before the batch commits: when a later statement fails, the batch
	// rolls back, and the flags before it trust terms the database never
	// kept.
	mutantBatchBeforeCommit = "batch-results-before-commit"
	// Every statement binds the first statement's lease: a flag with a
	// longer lease trusts its term past the row's expiry.
	mutantBatchFirstLease = "batch-binds-first-lease"
	// Requests of one holder for one name in one batch run once and share
	// the result: two flags of one process raise one term.
	mutantBatchCoalesce = "batch-coalesces-same-holder"
	// A request identical to one in a batch in flight (a flag's retry
	// after its attempt timed out) waits for that batch's result instead
	// of being sent (a singleflight): the flag counts its trust window
	// from its new send, after the statement that started the lease ran.
	mutantBatchJoinInFlight = "batch-joins-request-in-flight"
)

var errStatement = errors.New("sim: a statement of the batch failed; the batch rolled back")

// TestSimulationBatched runs batched schedules (simBatchSchedules, or the
// long mode) and fails on any safety or liveness violation.
func TestSimulationBatched(t *testing.T) {
	runSimulation(t, simOptions{run: "TestSimulationBatched$", batch: true})
}

// TestSimulationBatchedMutants shows that the batched schedules find each
// mutant of the batched path within simMutantBudget schedules.
func TestSimulationBatchedMutants(t *testing.T) {
	for _, mutant := range []string{
		mutantBatchUnsorted,
		mutantBatchBeforeCommit,
		mutantBatchFirstLease,
		mutantBatchCoalesce,
		mutantBatchJoinInFlight,
	} {
		t.Run(mutant, func(t *testing.T) {
			t.Parallel()
			runSimulation(t, simOptions{run: "TestSimulationBatchedMutants/" + mutant + "$", mutant: mutant, batch: true})
		})
	}
}

// batcher queues the Acquires of one process's flags.
type batcher struct {
	wake chan struct{} // the dispatcher has work: a request, or a free sender

	mu       sync.Mutex
	queue    []*pending
	senders  int
	inFlight []*pending // the requests of the batches in flight
}

func newBatcher() *batcher { return &batcher{wake: make(chan struct{}, 1)} }

// pending is one Acquire waiting for its batch.
type pending struct {
	m      *member
	ctx    context.Context
	req    leadership.Request
	at     time.Time     // when it was queued
	pause  time.Duration // the adversary's pause of the flag's goroutine after the reply
	res    leadership.Result
	err    error
	done   chan struct{}
	joined []*pending // the mutant's requests that share this one's result
}

// batchAcquire is an Acquire of m in batch mode: queued, then answered
// by its batch, or by the end of ctx.
func (m *member) batchAcquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	p, s := m.p, m.p.s
	m.checkBegin(ctx, "acquire")
	if p.state() == stateCrashed {
		<-s.teardown
		return leadership.Result{}, errCrashed
	}
	p.thaw() // a frozen process sends nothing,
	if err := ctx.Err(); err != nil {
		return leadership.Result{}, err
	}
	q := &pending{m: m, ctx: ctx, req: req, at: time.Now(), done: make(chan struct{})}
	p.batch.add(q, s.opt.mutant == mutantBatchJoinInFlight)
	res, err := leadership.Result{}, error(nil)
	select {
	case <-q.done:
		res, err = q.res, q.err
		if q.pause > 0 {
			time.Sleep(q.pause) // a frozen goroutine ignores its context
		}
	case <-ctx.Done(): // the batch may still take effect
		err = ctx.Err()
	}
	p.thaw()                       // and sees no reply or error until it thaws
	if p.state() == stateCrashed { // the reply reaches a dead process
		<-s.teardown
		return leadership.Result{}, errCrashed
	}
	if s.opt.verbose && err != nil {
		s.logf("%s acquire returns %v", m, err)
	}
	if err == nil && res.Acquired {
		s.poke()
	}
	return res, err
}

// add queues q and wakes the dispatcher. With join (the mutant), a
// request identical to one in flight waits for that one's result instead.
func (b *batcher) add(q *pending, join bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if join {
		for _, f := range b.inFlight {
			if f.req == q.req {
				f.joined = append(f.joined, q)
				return
			}
		}
	}
	b.queue = append(b.queue, q)
	b.signal()
}

func (b *batcher) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take removes the next batch from the queue: the oldest simMaxBatch
// requests (ordered by instant, then by flag), sorted by name for the
// statements; and the same requests in the queue's order. It returns nil
// when the queue is empty or simMaxSenders batches are in flight.
// Requests whose context has ended are dropped.
func (b *batcher) take() (sorted, queued []*pending) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.senders >= simMaxSenders {
		return nil, nil
	}
	b.queue = slices.DeleteFunc(b.queue, func(q *pending) bool {
		if q.ctx.Err() != nil { // its caller has returned already
			q.err = q.ctx.Err()
			close(q.done)
			return true
		}
		return false
	})
	slices.SortStableFunc(b.queue, func(x, y *pending) int {
		return cmp.Or(x.at.Compare(y.at), cmp.Compare(x.m.idx, y.m.idx))
	})
	n := min(len(b.queue), simMaxBatch)
	if n == 0 {
		return nil, nil
	}
	queued = slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	sorted = slices.Clone(queued)
	slices.SortStableFunc(sorted, func(x, y *pending) int { return strings.Compare(x.req.Name, y.req.Name) })
	b.senders++
	b.inFlight = append(b.inFlight, queued...)
	return sorted, queued
}

// dispatch is the process's sender pool: it forms a batch whenever
// requests wait and fewer than simMaxSenders batches are in flight.
func (p *proc) dispatch() {
	s, b := p.s, p.batch
	for {
		select {
		case <-b.wake:
		case <-s.teardown:
			return
		}
		for {
			// Every request of this instant joins, and any that comes
			// before the next multiple of simBatchTick, so that requests a
			// nanosecond apart do not race the dispatcher.
			time.Sleep(simBatchTick - time.Duration(time.Now().UnixNano()%int64(simBatchTick)))
			if p.thaw() { // a frozen process sends nothing;
				continue // its flags queue as they thaw
			}
			if p.state() == stateCrashed {
				break // nor does a dead one; its flags wait for the teardown
			}
			sorted, queued := b.take()
			if sorted == nil {
				break
			}
			c := p.batchPlan(sorted)
			s.late.Go(func() {
				p.send(sorted, queued, c)
				b.mu.Lock()
				b.senders--
				b.inFlight = slices.DeleteFunc(b.inFlight, func(q *pending) bool { return slices.Contains(queued, q) })
				b.signal()
				b.mu.Unlock()
			})
		}
	}
}

// batchPlan is what the adversary does to one batch.
type batchPlan struct {
	callPlan
	failAt     int           // the statement that fails, rolling the batch back; -1 for none
	retry      bool          // the failure is transient: the batch runs once more, as postgres's RetryOnce does
	retryAfter time.Duration // when
}

// batchPlan draws the fate of batch, and its members' pauses.
func (p *proc) batchPlan(batch []*pending) batchPlan {
	timeout, lease := batch[0].m.timeout, batch[0].m.lease
	for _, q := range batch {
		timeout, lease = min(timeout, q.m.timeout), min(lease, q.m.lease)
	}
	c := batchPlan{callPlan: p.plan(p.rng, timeout, lease), failAt: -1}
	if !p.s.adversary.Load() {
		return c
	}
	var quiet time.Time
	defer func() { p.s.quiet(quiet) }()
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.rng
	// A failed statement, more often in a batch of several, where it rolls
	// back the statements before it.
	if r.Float64()/p.s.intensity < 0.08*float64(min(len(batch), 3)) {
		// The first statement's failure is failBefore's; a later one's
		// rolls back statements that ran.
		c.failAt, c.retry = r.IntN(max(len(batch)-1, 1))+min(len(batch)-1, 1), r.IntN(2) == 0
		c.retryAfter = time.Duration(1 + r.Int64N(int64(time.Millisecond)))
	}
	for _, q := range batch {
		if r.Float64()/p.s.intensity < 0.03 {
			q.pause = time.Duration(r.Int64N(int64(5 * q.m.lease / 2)))
			quiet = later(quiet, time.Now().Add(q.pause+q.m.timeout))
		}
	}
	return c
}

// send runs one batch through the adversary and hands each request its
// result, or the batch's error.
func (p *proc) send(sorted, queued []*pending, c batchPlan) {
	s := p.s
	s.mu.Lock()
	s.res.batches++
	s.res.batched += len(sorted)
	s.res.biggest = max(s.res.biggest, len(sorted))
	if len(sorted) > 1 {
		s.res.batchKinds["of several statements"]++
	}
	for _, q := range sorted {
		if time.Since(q.at) > simBatchTick {
			s.res.batchKinds["requests queued behind batches in flight"]++
		}
	}
	switch {
	case c.preFrozen && c.pre > slices.MinFunc(sorted, func(x, y *pending) int { return cmp.Compare(x.m.lease, y.m.lease) }).m.lease:
		s.res.batchKinds["stalled in flight longer than a member's lease"]++
	case c.failAt >= 0 && c.retry:
		s.res.batchKinds["rolled back by a failed statement and retried"]++
	case c.failAt >= 0:
		s.res.batchKinds["rolled back by a failed statement"]++
	case c.lose:
		s.res.batchKinds["committed with the reply lost"]++
	}
	s.mu.Unlock()
	ctx, cancel := batchContext(sorted)
	defer cancel()
	results, errs := p.deliverable(ctx, sorted, c)
	to := sorted
	if s.opt.mutant == mutantBatchUnsorted {
		to = queued // the statements' order is the sorted one
	}
	p.batch.mu.Lock()
	defer p.batch.mu.Unlock()
	for i, q := range to {
		for _, r := range append([]*pending{q}, q.joined...) {
			r.res, r.err = results[i], errs[i]
			close(r.done)
		}
	}
}

// batchContext bounds a batch by the earliest deadline of its requests,
// as postgres/batch.go does, plus a nanosecond: the request with that
// deadline sees its own context end first, as it would, rather than at
// the instant its batch fails, which would leave the outcome to the order
// in which goroutines run.
func batchContext(batch []*pending) (context.Context, context.CancelFunc) {
	var deadline time.Time
	for _, q := range batch {
		if d, ok := q.ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
	}
	if deadline.IsZero() {
		return context.WithCancel(context.Background())
	}
	return context.WithDeadline(context.Background(), deadline.Add(time.Nanosecond))
}

// deliverable runs batch through the adversary, as call does one
// statement, and returns what each request receives.
func (p *proc) deliverable(ctx context.Context, batch []*pending, c batchPlan) ([]leadership.Result, []error) {
	s := p.s
	results, errs := make([]leadership.Result, len(batch)), make([]error, len(batch))
	all := func(err error) ([]leadership.Result, []error) {
		for i := range errs {
			errs[i] = err
		}
		return results, errs
	}
	s.quiet(time.Now().Add(c.pre + c.post))
	if c.preFrozen { // stalled in flight, whatever the deadline
		time.Sleep(c.pre)
	} else if slept, ok := sleepCtx(ctx, c.pre); !ok {
		if c.onWire { // the callers gave up, but the batch still reaches the database
			s.late.Go(func() {
				time.Sleep(c.pre - slept)
				if down, _ := s.outage(p); !down {
					p.exec(batch, c, " after the callers gave up")
				}
			})
		}
		return all(ctx.Err())
	}
	if down, hang := s.outage(p); down {
		if hang {
			<-ctx.Done()
			return all(ctx.Err())
		}
		return all(errOutage)
	}
	if c.failBefore {
		return all(errInjected)
	}
	res, ran, err := p.exec(batch, c, "")
	if err != nil {
		all(err)
		if s.opt.mutant == mutantBatchBeforeCommit {
			for i := range ran { // handed out before the batch rolled back
				results[i], errs[i] = res[i], nil
			}
		}
		return results, errs
	}
	if c.lose { // committed, but the reply is lost
		if c.loseHang {
			<-ctx.Done()
			return all(ctx.Err())
		}
		return all(errLost)
	}
	if c.postFrozen {
		time.Sleep(c.post)
	} else if _, ok := sleepCtx(ctx, c.post); !ok {
		return all(ctx.Err())
	}
	return res, errs
}

// exec runs batch at the database as one transaction, once more if its
// failure is transient, and returns the results (one per request), how
// many statements ran before a failure, and the batch's error.
func (p *proc) exec(batch []*pending, c batchPlan, how string) (_ []leadership.Result, ran int, _ error) {
	s := p.s
	reqs := make([]leadership.Request, 0, len(batch))
	stmt := make([]int, len(batch)) // the statement that answers each request
	for i, q := range batch {
		req := q.req
		if s.opt.mutant == mutantBatchFirstLease {
			req.Lease = batch[0].req.Lease
		}
		stmt[i] = len(reqs)
		if s.opt.mutant == mutantBatchCoalesce && i > 0 && len(reqs) > 0 {
			if last := reqs[len(reqs)-1]; last.Name == req.Name && last.Holder == req.Holder {
				stmt[i] = len(reqs) - 1
				continue
			}
		}
		reqs = append(reqs, req)
	}
	fail := func(i int) error {
		if i == c.failAt {
			return errStatement
		}
		return nil
	}
	out, err := s.db.AcquireBatch(context.Background(), reqs, fail)
	if err != nil && c.retry {
		s.ran(batch[0].m, "acquire batch"+how, 0, func() string {
			return fmt.Sprintf("%d statements: %v; retried", len(reqs), err)
		})
		time.Sleep(c.retryAfter)
		out, err = s.db.AcquireBatch(context.Background(), reqs, nil)
	}
	results := make([]leadership.Result, len(batch))
	for i, q := range batch {
		if stmt[i] >= len(out) {
			break
		}
		ran = i + 1
		results[i] = out[stmt[i]]
		if err == nil {
			s.ran(q.m, fmt.Sprintf("acquire (batch of %d)%s", len(batch), how), resultKey(results[i]),
				func() string { return resultText(q.req, results[i], nil) })
		}
	}
	if err != nil {
		s.ran(batch[0].m, "acquire batch"+how, 0, func() string {
			return fmt.Sprintf("%d statements: %v", len(reqs), err)
		})
	}
	return results, ran, err
}
