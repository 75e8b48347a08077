package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/dbflag/leadership/internal/sqlstore"
)

// The watcher is the follower side of the cross-process release hint (see
// Release notifications in the package documentation). One runs per
// Store while any flag of the store waits for releases (the first
// subscription starts it, the last one to end stops it), on one
// connection of the store's pool, taken once a flag of the store has
// lost an attempt to another holder.

const (
	// bellWait is how long the watcher's GET_LOCK waits for a bell before
	// it gives up and waits again: its one statement per bellWait while
	// nothing is released. A wait on a bell no flag of the store waits on
	// any more is cut short (see retarget), so only the statement's cost
	// bounds it.
	bellWait = 5 * time.Minute
	// silentFirst is how long the watcher leaves a bell alone after it
	// found the bell not held (its holder closed, crashed, could not take
	// it, or has not taken it yet: a new holder takes its bell just after
	// its first acquire returns); the pause grows fourfold, up to
	// silentMax, while it stays so.
	silentFirst = 100 * time.Millisecond
	silentMax   = 30 * time.Second
)

// NotifyReleases implements [leadership.ReleaseNotifier]: releases by
// flags of this store wake its flags at once; releases by other processes
// wake them through the store's watcher (see Release notifications in the
// package documentation), a hint on which the flags do not rely.
func (s *Store) NotifyReleases(name string) (<-chan struct{}, func()) {
	ch, unsubscribe := s.hub.Subscribe(name)
	s.pmu.Lock()
	s.subs++
	if s.subs == 1 && !s.closed && poolAllowsPush(s.db) {
		// The previous watcher, if any, has exited: the end of the last
		// subscription waited for it.
		ctx, stop := context.WithCancel(s.ctx)
		s.watchKick = make(chan struct{}, 1)
		s.wstop, s.wexited = stop, make(chan struct{})
		go s.watch(ctx, s.watchKick, s.wexited)
	}
	s.pmu.Unlock()
	var done bool
	return ch, func() {
		s.pmu.Lock()
		if done {
			s.pmu.Unlock()
			return
		}
		done = true
		unsubscribe()
		s.retarget()
		s.subs--
		var exited chan struct{}
		if s.subs == 0 && s.wstop != nil {
			s.wstop()
			exited, s.wstop = s.wexited, nil
		}
		s.pmu.Unlock()
		if exited != nil {
			<-exited
		}
	}
}

// HintsOtherProcesses reports whether releases by other processes wake
// this store's flags now: its watcher runs (a flag waits for releases,
// the pool has room for it, and the server has not refused its
// GET_LOCK). It is a hint, not the claim of NotifiesOtherProcesses: the
// holder's bell may be silent, so flags keep the 2 s cap on their
// default poll interval. The conformance suite (storetest.Hinter) checks
// with it that a graceful handover between processes comes well before
// the poll.
func (s *Store) HintsOtherProcesses() bool { return s.watching.Load() }

// watch runs the watcher until ctx ends or the server refuses its
// GET_LOCK (the flags then poll, as without it). When its connection
// fails (a server restart, a network failure, a statement timeout), it
// takes a new one after a pause of 1 s, doubling up to a minute.
func (s *Store) watch(ctx context.Context, kicked <-chan struct{}, exited chan<- struct{}) {
	defer close(exited)
	s.watching.Store(true)
	defer s.watching.Store(false)
	w := watcher{s: s, silent: make(map[string]time.Time), pause: make(map[string]time.Duration)}
	defer w.close()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	backoff := time.Second
	for {
		holder, wake := w.target()
		if holder != "" {
			err := w.wait(ctx, holder)
			if err == nil {
				backoff = time.Second
				continue
			}
			if errors.Is(err, errRetarget) {
				w.close() // the driver closed it to cut the wait short
				continue
			}
			if ctx.Err() != nil || refused(err) {
				return
			}
			w.close()
			wake = time.Now().Add(backoff)
			backoff = min(2*backoff, time.Minute)
		}
		timer.Reset(time.Until(wake))
		select {
		case <-ctx.Done():
			return
		case <-kicked:
		case <-timer.C:
		}
	}
}

// refused reports whether err is the server's refusal of the watcher's
// statements (GET_LOCK returned NULL, or an error reply other than an
// interruption), after which the watcher stops for good.
func refused(err error) bool {
	if errors.Is(err, errBellRefused) {
		return true
	}
	switch number(err) {
	case 0, errQueryInterrupted, errMaxExecTimeExceed, errStatementTimeout, errServerShutdown, errConnectionKilled:
		return false
	}
	return true
}

// watcher is the state of one watch.
type watcher struct {
	s       *Store
	conn    *sql.Conn
	db      string               // DATABASE() of conn
	current string               // the holder whose bell it waited on last
	silent  map[string]time.Time // holder → when to try its bell again
	pause   map[string]time.Duration
	waitFor time.Duration    // the wait of GET_LOCK, when shorter than bellWait
	looked  bool             // whether a look has been made
	free    map[string]int64 // free rows at the last look: name → version
}

// target chooses the bell to wait on: the current one while a flag of the
// store still waits on its holder, else the holder most of the store's
// flags wait on (the first by name on a tie), leaving out holders this
// store leads under (their releases wake its flags in process) and bells
// found silent. It returns "" and when to look again when there is none.
func (w *watcher) target() (string, time.Time) {
	names := w.s.hub.Names()
	now := time.Now()
	wake := now.Add(time.Hour)
	w.s.pmu.Lock()
	defer w.s.pmu.Unlock()
	own := make(map[string]bool)
	for t := range w.s.leading {
		own[t.holder] = true
	}
	count := make(map[string]int)
	waited := make(map[string]bool)
	for _, name := range names {
		h, ok := w.s.waitsOn[name]
		if !ok || own[h] {
			continue
		}
		waited[h] = true
		if until, quiet := w.silent[h]; quiet && until.After(now) {
			wake = minTime(wake, until)
			continue
		}
		count[h]++
	}
	for h := range w.silent {
		if !waited[h] { // forget holders no flag waits on any more
			delete(w.silent, h)
			delete(w.pause, h)
		}
	}
	if count[w.current] > 0 {
		return w.current, wake
	}
	holders := make([]string, 0, len(count))
	for h := range count {
		holders = append(holders, h)
	}
	sort.Slice(holders, func(i, j int) bool {
		if count[holders[i]] != count[holders[j]] {
			return count[holders[i]] > count[holders[j]]
		}
		return holders[i] < holders[j]
	})
	if len(holders) == 0 {
		return "", wake
	}
	w.current = holders[0]
	return w.current, wake
}

// errBellRefused stops the watcher: GET_LOCK returned NULL.
var errBellRefused = errors.New("GET_LOCK returned NULL")

// errRetarget ends a wait cut short by retarget.
var errRetarget = errors.New("no flag waits on the holder of this bell any more")

// retarget cuts the watcher's wait short when no flag of the store waits
// on the holder of its bell any more (a flag took the row over, learned of
// another holder, or was closed), so that it waits on the bell of the
// holder they now wait on. The driver then closes the connection, and the
// watcher takes a new one: this happens only when the holders change
// without a ring. Called with s.pmu held.
func (s *Store) retarget() {
	if s.waitCancel == nil {
		return
	}
	for _, name := range s.hub.Names() {
		if s.waitsOn[name] == s.waitHolder {
			return
		}
	}
	s.waitCancel()
	s.waitCancel = nil
}

// wait waits up to bellWait on holder's bell. When the bell rings, it
// passes the lock on at once and wakes the flags whose row became free.
// A bell granted at once is not held: the watcher leaves it alone for a
// while. It returns an error when the connection or the server failed.
func (w *watcher) wait(ctx context.Context, holder string) error {
	if w.conn == nil {
		conn, err := w.s.db.Conn(ctx)
		if err != nil {
			return err
		}
		w.conn = conn
		w.s.watchStatements.Add(1)
		if err := conn.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&w.db); err != nil {
			return err
		}
	}
	name := bellName(w.db, holder)
	var (
		used bool
		got  sql.NullInt64
	)
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.s.pmu.Lock()
	w.s.waitCancel, w.s.waitHolder = cancel, holder
	w.s.retarget() // a change since target() chose it
	w.s.pmu.Unlock()
	// IS_USED_LOCK is evaluated first: whether anyone held the bell when
	// the wait began.
	w.s.watchStatements.Add(1)
	waitFor := w.waitFor
	if waitFor == 0 {
		waitFor = bellWait
	}
	began := time.Now()
	err := w.conn.QueryRowContext(waitCtx, fmt.Sprintf(`SELECT IS_USED_LOCK('%s') IS NOT NULL, GET_LOCK('%[1]s', %d)`,
		name, int(waitFor.Seconds()))).Scan(&used, &got)
	w.s.pmu.Lock()
	w.s.waitCancel = nil
	w.s.pmu.Unlock()
	if err != nil && waitCtx.Err() != nil && ctx.Err() == nil {
		return errRetarget
	}
	if waited := time.Since(began); err != nil && waited >= 2*time.Second && !refused(err) {
		// A wait cut by a timeout of the client (readTimeout in the DSN)
		// or the server (max_statement_time): later waits end first, with
		// half the timeout to spare for a loaded machine's delays.
		w.waitFor = max(waited/2, time.Second).Truncate(time.Second)
	}
	if err != nil {
		return err
	}
	if !got.Valid {
		return errBellRefused
	}
	if got.Int64 == 0 {
		return nil // nothing released for bellWait
	}
	w.s.watchStatements.Add(1)
	var released sql.NullInt64
	if err := w.conn.QueryRowContext(ctx, `SELECT RELEASE_LOCK('`+name+`')`).Scan(&released); err != nil {
		return err
	}
	if !used {
		pause := max(w.pause[holder]*4, silentFirst)
		pause = min(pause, silentMax)
		w.pause[holder], w.silent[holder] = pause, time.Now().Add(pause)
		return nil
	}
	delete(w.pause, holder)
	delete(w.silent, holder)
	w.s.watchRings.Add(1)
	return w.look(ctx)
}

// look lists the free rows (no holder) in a read-only transaction of its
// own (so that it sees the latest commits whatever the session's
// autocommit) and wakes the store's flags that wait on a row free since
// the last look (a new (name, version) pair); at the first look, on every
// free row.
func (w *watcher) look(ctx context.Context) error {
	w.s.watchStatements.Add(3)
	tx, err := w.conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	free, err := sqlstore.FreeRows(ctx, tx)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	before := w.free
	if !w.looked {
		before = nil // the first look wakes every flag whose row is free
	}
	sqlstore.WakeFreed(&w.s.hub, before, free)
	w.looked, w.free = true, free
	return nil
}

// close closes the connection rather than return it to the pool: a wait
// cut short may have left it holding a bell.
func (w *watcher) close() {
	if w.conn == nil {
		return
	}
	_ = w.conn.Raw(func(any) error { return driver.ErrBadConn })
	w.conn.Close()
	w.conn = nil
}
