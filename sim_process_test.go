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

// proc is one process with one Flag.
type proc struct {
	s        *sim
	id       int
	name     string
	lease    time.Duration
	margin   time.Duration
	timeout  time.Duration // the flag's Timeout, around which the adversary slows calls
	noJitter bool
	notify   bool
	flag     atomic.Pointer[leadership.Flag]
	// closed is set by whoever calls Close, once: a second Close would
	// wait on a mutex, which synctest does not count as durably blocked.
	closed atomic.Bool

	// outageUntil and outageHang are guarded by s.mu.
	outageUntil time.Time
	outageHang  bool

	mu          sync.Mutex
	rng         *rand.Rand // the adversary's decisions about this process's calls
	st          procState
	frozenUntil time.Time
	vetoUntil   time.Time
}

func (p *proc) String() string { return fmt.Sprintf("flag#%d", p.id) }

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
// flag, and retries like a supervisor restarting it when Build fails. It
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
	lease := s.leases[s.rng.IntN(len(s.leases))]
	p := &proc{
		s:        s,
		id:       id,
		name:     name,
		lease:    lease,
		margin:   lease / time.Duration(s.margins[s.rng.IntN(len(s.margins))]),
		timeout:  lease / 5,
		noJitter: s.rng.IntN(2) == 0,
		notify:   s.rng.IntN(2) == 0,
		rng:      rand.New(rand.NewPCG(s.opt.seed, uint64(id)+1)),
	}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	s.logf("%s starts: process %q, lease %v, margin %v, jitter %v, notify %v", p, name, lease, p.margin, !p.noJitter, p.notify)
	var store leadership.Store = &procStore{p}
	if p.notify {
		store = notifyingProcStore{&procStore{p}}
	}
	b := leadership.NewFlag().Store(store).Name(simFlag).Process(name).Lease(lease).
		SafetyMargin(p.margin).Timeout(p.timeout).Migrate(false).Precheck(p.precheck).
		RandInt64NForTest(simRand).ClocksForTest(awake)
	if p.noJitter {
		b.Jitter(0)
	}
	if s.opt.mutant == mutantTrustFromReply {
		b.TrustFromReplyForTest()
	}
	s.wg.Go(func() {
		for {
			f, err := b.Build(context.Background())
			if err == nil {
				p.flag.Store(f)
				p.setState(stateRunning)
				s.logf("%s built", p)
				select {
				case <-s.teardown: // built during the teardown
					if p.closed.CompareAndSwap(false, true) {
						_ = f.Close()
					}
				default:
				}
				return
			}
			s.logf("%s: %v", p, err)
			if p.state() == stateCrashed {
				return
			}
			select {
			case <-time.After(lease / 2):
			case <-s.teardown:
				return
			}
		}
	})
	return twin
}

func (p *proc) precheck(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.vetoUntil) {
		return errVetoed
	}
	return nil
}

// thaw waits while the process is frozen.
func (p *proc) thaw() {
	for {
		p.mu.Lock()
		d := time.Until(p.frozenUntil)
		p.mu.Unlock()
		if d <= 0 {
			return
		}
		time.Sleep(d)
	}
}

// procStore is the store as one process reaches it, through the adversary.
type procStore struct{ p *proc }

func (ps *procStore) Migrate(ctx context.Context) error { return ps.p.s.store.Migrate(ctx) }

func (ps *procStore) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	return call(ps.p, ctx, "acquire",
		func() (leadership.Result, error) { return ps.p.s.store.Acquire(context.Background(), req) },
		func(r leadership.Result) uint64 {
			return uint64(r.Version)<<1 | b2u(r.Acquired) ^ uint64(r.ExpiresAt.Sub(r.Now))<<20
		},
		func(r leadership.Result, err error) string {
			return fmt.Sprintf("version %d -> acquired %v, holder %q, version %d, expires in %v, error %v",
				req.Version, r.Acquired, r.Holder, r.Version, r.ExpiresAt.Sub(r.Now), err)
		},
		func(r leadership.Result) bool { return r.Acquired })
}

func (ps *procStore) Release(ctx context.Context, name, holder string, version int64) (bool, error) {
	return call(ps.p, ctx, "release",
		func() (bool, error) { return ps.p.s.store.Release(context.Background(), name, holder, version) },
		func(ok bool) uint64 { return uint64(version)<<1 | b2u(ok) },
		func(ok bool, err error) string {
			return fmt.Sprintf("version %d -> released %v, error %v", version, ok, err)
		},
		nil)
}

func (ps *procStore) Evict(ctx context.Context, name string) (bool, error) {
	return ps.p.s.store.Evict(ctx, name)
}

func (ps *procStore) Flags(ctx context.Context) ([]leadership.Record, time.Time, error) {
	return ps.p.s.store.Flags(ctx)
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
	return ps.p.s.db.NotifyReleases(name)
}

// awake is the clock pair of a machine that is never suspended: the
// simulation suspends no machine (clock_test.go does), and this keeps the
// system calls of the real pair out of millions of attempts.
func awake() (mono, boot time.Duration) { return 0, 0 }
