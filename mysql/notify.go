package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// Release notifications across processes (see the package documentation):
// the store that leads under a holder name holds its bell and rings it
// after each release (ringBells); the stores whose flags lost to the
// holder wait on it (follow) and look at the rows when it rings.

const (
	maxWaiters = 4                      // holder names followed at once (waiterRoom)
	bellWait   = 5 * time.Minute        // a waiter's GET_LOCK: its statement while nothing is released
	bellRetake = 2 * time.Second        // the bell's GET_LOCK after a ring, while the waiters pass it along
	lookGap    = 100 * time.Millisecond // between two looks of a waiter, after lookBurst: the cost of a flood of rings
	lookBurst  = 3                      // looks at once: the rings of a process's releases in a few batches
	// A waiter pauses after a bell nobody holds (silent…, growing
	// fourfold) and after a failure (retryFirst, doubling); the bell
	// tries again to take a bell held elsewhere after takeFirst, doubling.
	silentFirst, silentMax          = 100 * time.Millisecond, 30 * time.Second
	retryFirst, takeFirst, retryMax = time.Second, 100 * time.Millisecond, time.Minute
)

// NotifyReleases implements [leadership.ReleaseNotifier]: releases by
// flags of this store wake its flags at once; releases by other processes
// wake them through the store's waiters (see Release notifications in
// the package documentation), a hint on which the flags do not rely.
func (s *Store) NotifyReleases(name string) (<-chan struct{}, func()) {
	return s.hub.Subscribe(name)
}

// HintsOtherProcesses reports whether releases by other processes wake
// this store's flags now: a waiter of the store waits on a bell (a wait
// on a bell nobody holds returns at once). It is a hint, not the claim of
// NotifiesOtherProcesses (storetest.Hinter): flags keep the 2 s cap on
// their default poll interval.
func (s *Store) HintsOtherProcesses() bool { return s.waiting.Load() > 0 }

// term is a term this store leads.
type term struct {
	name, holder string
	version      int64
}

// observe records the outcome of an attempt: the terms the store leads,
// whose holder names' bells it holds, and the holder a losing flag waits
// on (its own name too: another Store of the process), whose bell a
// waiter follows. A flag that lost to a term this store leads (a flag of
// the same name under the same holder name: the default name is the
// process's) waits on no bell: the store's release of that term wakes it.
func (s *Store) observe(req leadership.Request, res leadership.Result) {
	waitsOn := ""
	s.pmu.Lock()
	if won := (term{req.Name, req.Holder, res.Version}); res.Acquired {
		_, known := s.leading[won]
		if s.leading[won] = time.Now().Add(req.Lease); !known {
			s.startBell()
		}
	} else {
		if lost := (term{req.Name, req.Holder, req.Version}); !s.leading[lost].IsZero() {
			delete(s.leading, lost)
			s.startBell() // gives the bell up after the holder's last term
		}
		if s.leading[term{req.Name, res.Holder, res.Version}].IsZero() {
			waitsOn = res.Holder
		}
	}
	s.pmu.Unlock()
	s.hub.Follow(req.Name, waitsOn)
}

// released records that the store's Release of a term committed and, if
// it changed the row, has the holder's bell rung. Every release of the
// store comes through here; those recorded before the bell's goroutine
// runs again share one ring.
func (s *Store) released(name, holder string, version int64, changed bool) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	delete(s.leading, term{name, holder, version})
	if changed {
		s.rings[holder] = true
	}
	s.startBell()
}

// startBell wakes the bell's goroutine, or starts it; s.pmu held.
func (s *Store) startBell() {
	if s.bellOn {
		kick(s.bellKick)
	} else if !s.closed && s.waiterRoom() > 0 {
		s.bellOn = true
		s.running.Go(s.ringBells)
	}
}

// waiterRoom is how many holder names the store follows at once
// (Hub.Room): on a capped pool, as many as leave a connection for the
// bell and one for the flags' statements (none, and no bell, below three).
func (s *Store) waiterRoom() int {
	if n := s.db.Stats().MaxOpenConnections; n > 0 {
		return max(0, min(maxWaiters, n-2))
	}
	return maxWaiters
}

// kick wakes the goroutine that reads ch without blocking.
func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// bellName is the name of the bell of holder in the database db: a hash
// of both (lock names are server-wide and at most 64 characters), with
// only letters, digits and slashes, so that statements spell it out (one
// round trip whatever the DSN's interpolateParams).
func bellName(db, holder string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d:%s%d:%s", len(db), db, len(holder), holder))
	return "leadership/bell/" + hex.EncodeToString(sum[:])[:40]
}

// bells are this process's bells, by server and lock name: a lock is held
// by one connection, so of two Stores of the process that lead under one
// holder name (the default name is the process's), one holds the bell and
// rings it for the other's releases; the other takes it once it is let go.
var bells = struct {
	sync.Mutex
	held map[string]*Store // key → the store holding it
	// stores counts the bell goroutines of each store that run: a store
	// whose goroutine has returned (bellOn false) may start the next
	// before the first has run its deferred cleanup.
	stores map[*Store]int
}{held: map[string]*Store{}, stores: map[*Store]int{}}

// bellHolder returns the store of this process holding the bell key.
func bellHolder(key string) *Store {
	bells.Lock()
	defer bells.Unlock()
	return bells.held[key]
}

// setBell records that s holds the bell key or, with held false, has let
// it go, which wakes the process's other bells: one may take it.
func setBell(key string, s *Store, held bool) {
	bells.Lock()
	defer bells.Unlock()
	if held {
		bells.held[key] = s
	} else if bells.held[key] == s {
		delete(bells.held, key)
		for o := range bells.stores {
			kick(o.bellKick)
		}
	}
}

// enlist records that a bell goroutine of s runs, so that s is woken when
// another store of the process lets a bell go, until the returned
// function records that it has returned.
func enlist(s *Store) (leave func()) {
	bells.Lock()
	defer bells.Unlock()
	bells.stores[s]++
	return func() {
		bells.Lock()
		defer bells.Unlock()
		if bells.stores[s]--; bells.stores[s] == 0 {
			delete(bells.stores, s)
		}
	}
}

// ringBells keeps the bells of the holder names the store leads under on
// one connection, rings them after releases, and returns once the store
// leads nothing and holds no bell.
func (s *Store) ringBells() {
	b := bell{s: s, held: map[string]bool{}}
	defer enlist(s)()
	defer b.drop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		wait := time.Hour
		wanted := make(map[string]bool)
		s.pmu.Lock()
		for t, until := range s.leading {
			if until.After(now) {
				wanted[t.holder] = true
				wait = min(wait, until.Sub(now))
			} else {
				delete(s.leading, t) // past its lease without a renewal
			}
		}
		rings := s.rings
		s.rings = make(map[string]bool)
		s.pmu.Unlock()
		if err := b.sync(s.ctx, wanted, rings); err != nil {
			b.drop() // its locks are free: taken again after a pause
			b.pause = min(max(2*b.pause, takeFirst), retryMax)
			b.takeAt = time.Now().Add(b.pause)
		}
		s.pmu.Lock()
		if s.closed || len(b.held) == 0 && len(s.leading) == 0 && len(s.rings) == 0 {
			s.bellOn = false
			s.pmu.Unlock()
			return
		}
		s.pmu.Unlock()
		if b.takeAt.After(now) {
			wait = min(wait, b.takeAt.Sub(now)) // else kicked when a bell is let go
		}
		timer.Reset(wait - time.Since(now))
		select {
		case <-s.ctx.Done():
		case <-s.bellKick:
		case <-timer.C:
		}
	}
}

// bell is the connection of ringBells and the bells it holds.
type bell struct {
	s          *Store
	conn       *sql.Conn
	db, server string          // DATABASE() and the server, learnt at the first connection
	held       map[string]bool // holder → conn holds its bell
	// A bell another connection holds (another process under the same
	// name, waiters passing it along), and every bell after a failure,
	// is taken again at takeAt, after a pause that doubles from takeFirst
	// up to retryMax.
	takeAt time.Time
	pause  time.Duration
}

// key identifies the bell of holder among the process's (bells).
func (b *bell) key(holder string) string { return b.server + "/" + bellName(b.db, holder) }

// sync rings the bells of rings (or has the store of this process that
// holds one ring it), gives up the bells no longer wanted, and takes
// those wanted but those another store of the process holds.
func (b *bell) sync(ctx context.Context, wanted, rings map[string]bool) error {
	if b.server == "" && len(wanted)+len(rings) > 0 {
		if err := b.connect(ctx); err != nil {
			return err
		}
	}
	for h := range rings {
		if other := bellHolder(b.key(h)); !b.held[h] && other != nil && other != b.s {
			other.pmu.Lock()
			other.rings[h] = true
			other.startBell()
			other.pmu.Unlock()
		}
	}
	for h := range b.held {
		// RELEASE_LOCK grants the bell to the waiters one after the other
		// and, while it is wanted, the GET_LOCK of the same statement
		// queues the store behind them: the bell is never free between a
		// ring and its retake, so that a waiter that waits again after its
		// look waits for the next ring instead of finding it free.
		query := `SELECT RELEASE_LOCK('%s') + GET_LOCK('%[1]s', ` + fmt.Sprint(int(bellRetake.Seconds())) + `) = 2`
		switch {
		case !wanted[h]:
			query = `SELECT RELEASE_LOCK('%s') >= 0`
		case !rings[h]:
			continue
		}
		got, err := b.lock(ctx, query, h)
		if err == nil && !got {
			err = errBellLost // it may hold the bell or not: dropped
		}
		if err != nil || !wanted[h] {
			delete(b.held, h)
			setBell(b.key(h), b.s, false)
		}
		if err != nil {
			return err
		}
	}
	if !time.Now().Before(b.takeAt) {
		pause := time.Duration(0)
		for h := range wanted {
			if other := bellHolder(b.key(h)); b.held[h] || other != nil && other != b.s {
				continue // held, or rung for this store by the other
			}
			got, err := b.lock(ctx, `SELECT GET_LOCK('%s', 0) = 1`, h)
			if err != nil {
				return err
			}
			if got {
				b.held[h] = true
				setBell(b.key(h), b.s, true)
			} else {
				pause = min(max(2*b.pause, takeFirst), retryMax)
			}
		}
		if b.pause = pause; pause > 0 {
			b.takeAt = time.Now().Add(pause)
		}
	}
	if len(b.held) == 0 && b.conn != nil {
		b.conn.Close() // holds no lock: back to the pool
		b.conn = nil
	}
	return nil
}

// connect takes the bell's connection from the pool if it has none.
func (b *bell) connect(ctx context.Context) error {
	if b.conn != nil {
		return nil
	}
	conn, err := b.s.db.Conn(ctx)
	if err != nil {
		return err
	}
	b.conn = conn
	if b.server != "" {
		return nil
	}
	return conn.QueryRowContext(ctx, `SELECT DATABASE(), CONCAT(@@hostname, ':', @@port)`).Scan(&b.db, &b.server)
}

// lock runs query on the bell of holder, its %s, and reports whether it
// returned true.
func (b *bell) lock(ctx context.Context, query, holder string) (bool, error) {
	if err := b.connect(ctx); err != nil {
		return false, err
	}
	var got sql.NullBool
	if err := b.conn.QueryRowContext(ctx, fmt.Sprintf(query, bellName(b.db, holder))).Scan(&got); err != nil {
		return false, err
	}
	if !got.Valid {
		return false, errLockNull
	}
	return got.Bool, nil
}

var (
	// errLockNull is the NULL of GET_LOCK or RELEASE_LOCK: an error of the
	// server.
	errLockNull = errors.New("user-level lock function returned NULL")
	// errBellLost: the bell was not taken back within bellRetake of a ring.
	errBellLost = errors.New("the bell was not taken back after its ring")
)

// drop closes the connection, which frees every lock it holds.
func (b *bell) drop() {
	for h := range b.held {
		delete(b.held, h)
		setBell(b.key(h), b.s, false)
	}
	closeConn(b.conn)
	b.conn = nil
}

// closeConn closes conn, if any, without returning it to the pool: it may
// hold a lock, or wait for one.
func closeConn(conn *sql.Conn) {
	if conn != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		conn.Close()
	}
}

// follow is the store's waiter on the bell of holder until ctx ends
// (Hub.Watch: one per holder name that flags of the store lost to, up to
// waiterRoom). A ring makes it pass the lock on at once, so that every
// waiting process is granted in turn, and look at the rows; a bell nobody
// holds makes it look too, and pause. A wait cut after t (by a timeout of
// the client, readTimeout, or of the server, max_statement_time; or by a
// restart, a network failure) makes the next wait last half of t, and
// each wait that ends normally doubles the next, up to bellWait; once
// two waits were cut after about the same time, which shows a timeout,
// waits keep the shorter length.
func (s *Store) follow(ctx context.Context, holder string) {
	if holder == "" {
		return // the flags that wait on no holder
	}
	var (
		conn            *sql.Conn
		name            string
		free            map[string]int64 // free rows at the last look: name → version
		nextLook        time.Time        // when a look is due: one may come lookBurst−1 lookGaps earlier
		waitFor, silent = bellWait, time.Duration(0)
		backoff         = retryFirst
		cutAfter        time.Duration // how long the last wait cut had waited
		timeout         bool          // two waits cut after about the same time
	)
	defer func() { closeConn(conn) }()
	// look lists the free rows, up to lookBurst times at once (the rings
	// of the releases of a process closing its flags: a few batches)
	// and then once per lookGap, and wakes the flags waiting on a row
	// free since the last look (a new (name, version) pair); at the first
	// look, on every free row.
	look := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(nextLook.Add(-(lookBurst - 1) * lookGap))):
		}
		s.watchStatements.Add(1)
		now, err := sqlstore.FreeRows(ctx, conn)
		if err == nil {
			sqlstore.WakeFreed(&s.hub, free, now)
			free, nextLook = now, time.Now().Add(max(time.Until(nextLook), 0)+lookGap)
		}
		return err
	}
	for ctx.Err() == nil {
		var (
			got sql.NullInt64
			err error
		)
		if conn == nil {
			conn, name, err = s.waiterConn(ctx, holder)
		}
		if err == nil {
			s.watchStatements.Add(1)
			s.waiting.Add(1)
			began := time.Now()
			err = conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT CASE WHEN IS_USED_LOCK('%s') IS NULL THEN -1 ELSE GET_LOCK('%[1]s', %d) END`,
				name, int(waitFor.Seconds()))).Scan(&got)
			s.waiting.Add(-1)
			if waited := time.Since(began); err != nil && ctx.Err() == nil && waited >= 2*time.Second {
				timeout = timeout || (waited-cutAfter).Abs() < time.Second
				cutAfter, waitFor = waited, max(waited/2, time.Second).Truncate(time.Second)
			}
		}
		if err == nil && !got.Valid {
			err = errLockNull
		}
		pause := time.Duration(0)
		switch {
		case err != nil:
		case got.Int64 == 1: // rung, or its holder's connection died: the look tells
			silent = 0
			s.watchStatements.Add(1)
			if err = conn.QueryRowContext(ctx, `SELECT RELEASE_LOCK('`+name+`')`).Scan(&got); err == nil {
				err = look()
			}
		case got.Int64 == -1: // nobody holds it
			silent = min(max(4*silent, silentFirst), silentMax)
			pause, err = silent, look()
		default: // nothing released for waitFor
			silent = 0
			if !timeout {
				waitFor = min(2*waitFor, bellWait)
			}
		}
		if err != nil {
			closeConn(conn)
			conn, pause, backoff = nil, backoff, min(2*backoff, retryMax)
		} else {
			backoff = retryFirst
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// waiterConn takes a waiter's connection from the pool, in autocommit
// mode, so that each look is one statement that sees the latest commits
// whatever the session's setting, and returns it with the name of the
// bell of holder.
func (s *Store) waiterConn(ctx context.Context, holder string) (*sql.Conn, string, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, "", err
	}
	s.watchStatements.Add(2)
	var db string
	if _, err = conn.ExecContext(ctx, `SET autocommit = 1`); err == nil {
		err = conn.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&db)
	}
	if err != nil {
		closeConn(conn)
		return nil, "", err
	}
	return conn, bellName(db, holder), nil
}
