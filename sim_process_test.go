package leadership_test

// The simulation's process model (see sim_test.go): one Flag per process,
// built like a supervisor would, reaching the database through the
// adversary.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbflag/leadership"
)

type procState int

const (
	stateBuilding procState = iota
	stateRunning
	stateClosing
	stateClosed
	stateCrashed
)

// proc is one process: one Flag, or in batch mode several flags that
// share one Store, whose concurrent Acquires go out in batches
// (sim_batch_test.go).
type proc struct {
	s       *sim
	id      int
	name    string
	members []*member
	batch   *batcher // batch mode only
	built   atomic.Int32

	// outageUntil and outageHang are guarded by s.mu.
	outageUntil time.Time
	outageHang  bool

	mu          sync.Mutex
	rng         *rand.Rand // the adversary's decisions about this process's calls (in batch mode, its batches)
	st          procState
	frozenUntil time.Time
	vetoUntil   time.Time
}

// member is one Flag of a process.
type member struct {
	p        *proc
	idx      int // in p.members
	flagName string
	lease    time.Duration
	margin   time.Duration
	timeout  time.Duration // the flag's Timeout, around which the adversary slows calls
	noJitter bool
	notify   bool
	rng      *rand.Rand // the adversary's decisions about this flag's own calls: p.rng, or its own in batch mode
	flag     atomic.Pointer[leadership.Flag]
	// closed is set by whoever calls Close, once: a second Close would
	// wait on a mutex, which synctest does not count as durably blocked.
	closed atomic.Bool
}

func (p *proc) String() string { return fmt.Sprintf("flag#%d", p.id) }

func (m *member) String() string {
	if m.p.batch == nil {
		return m.p.String()
	}
	return fmt.Sprintf("flag#%d.%d(%s)", m.p.id, m.idx, m.flagName)
}

func (p *proc) state() procState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st
}

func (p *proc) setState(st procState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st != stateCrashed {
		p.st = st
	}
}

// spawn starts a process named name (a fresh name if ""): it builds its
// flags, and retries like a supervisor restarting it when Build fails. It
// reports whether a live process already has that name.
func (s *sim) spawn(name string) (twin bool) {
	id := len(s.procs)
	if name == "" {
		name = fmt.Sprintf("p%d", id)
	}
	for _, q := range s.procs {
		if st := q.state(); q.name == name && (st == stateBuilding || st == stateRunning) {
			twin = true
		}
	}
	p := &proc{s: s, id: id, name: name, rng: rand.New(rand.NewPCG(s.opt.seed, uint64(id)+1))}
	if !s.opt.batch {
		p.addMember(simFlag, p.rng)
	} else {
		// One flag per name, each with its own lease and settings, and
		// sometimes a second flag of one name in the same process: two
		// requests of one holder for one name then meet in one batch.
		for _, n := range s.names {
			p.addMember(n, nil)
		}
		if s.rng.IntN(3) == 0 {
			p.addMember(s.names[s.rng.IntN(len(s.names))], nil)
		}
		p.batch = newBatcher()
	}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	if p.batch != nil {
		s.late.Go(p.dispatch)
	}
	for _, m := range p.members {
		s.logf("%s starts: process %q, lease %v, margin %v, jitter %v, notify %v", m, name, m.lease, m.margin, !m.noJitter, m.notify)
		m.start()
	}
	return twin
}

// addMember adds a flag named flagName, with settings drawn by the
// driver; rng is its adversary's source, nil for one of its own.
func (p *proc) addMember(flagName string, rng *rand.Rand) {
	s := p.s
	lease := s.leases[s.rng.IntN(len(s.leases))]
	m := &member{
		p:        p,
		idx:      len(p.members),
		flagName: flagName,
		lease:    lease,
		margin:   lease / time.Duration(s.margins[s.rng.IntN(len(s.margins))]),
		timeout:  lease / 5,
		noJitter: s.rng.IntN(2) == 0,
		notify:   s.rng.IntN(2) == 0,
		rng:      rng,
	}
	if rng == nil {
		m.rng = rand.New(rand.NewPCG(s.opt.seed, uint64(p.id+1)<<16|uint64(m.idx+1)))
	}
	p.members = append(p.members, m)
}

// start builds m's flag in the background, retrying like a supervisor.
func (m *member) start() {
	p, s := m.p, m.p.s
	var store leadership.Store = &procStore{m: m}
	if m.notify {
		store = notifyingProcStore{&procStore{m: m}}
	}
	b := leadership.NewFlag().Store(store).Name(m.flagName).Process(p.name).Lease(m.lease).
		SafetyMargin(m.margin).Timeout(m.timeout).Migrate(false).Precheck(p.precheck).
		RandInt64NForTest(simRand).ClocksForTest(awake).
		// Renewal ticks shared by flags built at one instant would put
		// their attempts on one virtual instant, in an order the seed
		// does not fix (as a latency of at least a nanosecond keeps
		// statements apart).
		RenewTicksShiftedForTest(time.Duration(1 + splitmix(s.opt.seed<<24^uint64(p.id)<<8^uint64(m.idx))%uint64(10*time.Microsecond)))
	if m.noJitter {
		b.Jitter(0)
	}
	if s.opt.mutant == mutantTrustFromReply {
		b.TrustFromReplyForTest()
	}
	s.wg.Go(func() {
		for {
			f, err := b.Build(context.Background())
			if err == nil {
				m.flag.Store(f)
				if int(p.built.Add(1)) == len(p.members) {
					p.setState(stateRunning)
				}
				s.logf("%s built", m)
				select {
				case <-s.teardown: // built during the teardown
					if m.closed.CompareAndSwap(false, true) {
						_ = f.Close()
					}
				default:
				}
				return
			}
			s.logf("%s: %v", m, err)
			if p.state() == stateCrashed {
				return
			}
			select {
			case <-time.After(m.lease / 2):
			case <-s.teardown:
				return
			}
		}
	})
}

func (p *proc) precheck(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.vetoUntil) {
		return errVetoed
	}
	return nil
}

// thaw waits while the process is frozen, and reports whether it did.
func (p *proc) thaw() (waited bool) {
	for {
		p.mu.Lock()
		d := time.Until(p.frozenUntil)
		p.mu.Unlock()
		if d <= 0 {
			return waited
		}
		time.Sleep(d)
		waited = true
	}
}

// procStore is the store as one flag of a process reaches it, through the
// adversary: each call alone, or in batch mode its Acquires in the
// process's batches.
type procStore struct {
	m     *member
	ticks leadership.RenewalTicks
}

func (ps *procStore) Migrate(ctx context.Context) error { return ps.m.p.s.store.Migrate(ctx) }

// MaxAcquireBatch and RenewalTicks make the flags renew at ticks, as on a
// store that batches, in every mode.
func (ps *procStore) MaxAcquireBatch() int { return simMaxBatch }

func (ps *procStore) RenewalTicks() *leadership.RenewalTicks { return &ps.ticks }

func (ps *procStore) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	if ps.m.p.batch != nil {
		return ps.m.batchAcquire(ctx, req)
	}
	return call(ps.m, ctx, "acquire",
		func() (leadership.Result, error) { return ps.m.p.s.store.Acquire(context.Background(), req) },
		func(r leadership.Result) uint64 { return resultKey(r) },
		func(r leadership.Result, err error) string { return resultText(req, r, err) },
		func(r leadership.Result) bool { return r.Acquired })
}

func resultKey(r leadership.Result) uint64 {
	return uint64(r.Version)<<1 | b2u(r.Acquired) ^ uint64(r.ExpiresAt.Sub(r.Now))<<20
}

func resultText(req leadership.Request, r leadership.Result, err error) string {
	return fmt.Sprintf("version %d -> acquired %v, holder %q, version %d, expires in %v, error %v",
		req.Version, r.Acquired, r.Holder, r.Version, r.ExpiresAt.Sub(r.Now), err)
}

func (ps *procStore) Release(ctx context.Context, name, holder string, version int64) (bool, error) {
	return call(ps.m, ctx, "release",
		func() (bool, error) { return ps.m.p.s.store.Release(context.Background(), name, holder, version) },
		func(ok bool) uint64 { return uint64(version)<<1 | b2u(ok) },
		func(ok bool, err error) string {
			return fmt.Sprintf("version %d -> released %v, error %v", version, ok, err)
		},
		nil)
}

func (ps *procStore) Evict(ctx context.Context, name string) (bool, error) {
	return ps.m.p.s.store.Evict(ctx, name)
}

func (ps *procStore) Flags(ctx context.Context) ([]leadership.Record, time.Time, error) {
	return ps.m.p.s.store.Flags(ctx)
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// notifyingProcStore also forwards release notifications.
type notifyingProcStore struct{ *procStore }

func (ps notifyingProcStore) NotifyReleases(name string) (<-chan struct{}, func()) {
	return ps.m.p.s.db.NotifyReleases(name)
}

// awake is the clock pair of a machine that is never suspended: the
// simulation suspends no machine (clock_test.go does), and this keeps the
// system calls of the real pair out of millions of attempts.
func awake() (mono, boot time.Duration) { return 0, 0 }
