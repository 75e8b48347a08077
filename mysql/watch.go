package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
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
	// bellLookUpTimeout bounds a lookup of nameplates on the pool during
	// a wait (lookUp).
	bellLookUpTimeout = 5 * time.Second
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
		s.helpers = s.newHelpers(ctx)
		go s.watch(ctx, s.helpers, s.watchKick, s.wexited)
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
// GET_LOCK (the flags then poll, as without it), and stops its helpers
// then. When its connection
// fails (a server restart, a network failure, a statement timeout), it
// takes a new one after a pause of 1 s, doubling up to a minute.
func (s *Store) watch(ctx context.Context, set *helpers, kicked <-chan struct{}, exited chan<- struct{}) {
	defer close(exited)
	s.watching.Store(true)
	defer s.watching.Store(false)
	defer s.stopHelpers(set)
	w := newWatcher(s, set)
	defer w.close()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	backoff := time.Second
	for {
		id, wake, err := w.target(ctx)
		if err == nil && id != 0 {
			if err = w.wait(ctx, id); err == nil {
				backoff = time.Second
				continue
			}
		}
		if err != nil {
			if errors.Is(err, errRetarget) {
				w.close() // the driver closed it to cut the wait short
				continue
			}
			if ctx.Err() != nil || errors.Is(err, errStopped) || refused(err) {
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

// watcher is the state of one watch: the watcher's own (watch) or a
// helper's (helper.go). What is known of the holders' nameplates is the
// store's, shared by both (nameplates).
type watcher struct {
	s       *Store
	set     *helpers // of the run of the watcher it belongs to (nil for a test's)
	conn    *sql.Conn
	db      string           // DATABASE() of conn
	current int64            // the bell it waited on last, by its store's connection id
	waitFor time.Duration    // the wait of GET_LOCK, when shorter than bellWait
	looked  bool             // whether a look has been made
	free    map[string]int64 // free rows at the last look: name → version
}

// newWatcher returns a watcher of s that has no connection yet, for the
// run of the watcher whose helpers are set.
func newWatcher(s *Store, set *helpers) watcher { return watcher{s: s, set: set} }

// stale reports whether the run of the watcher w belongs to has been
// succeeded by another (the last subscription ended and a new one began
// before it exited): it then leaves the store's state alone. Called with
// s.pmu held.
func (w *watcher) stale() bool { return w.s.helpers != w.set }

// errStopped ends a run of the watcher that has been succeeded (stale).
var errStopped = errors.New("the watcher has stopped")

// nameplates is what the watcher and its helpers know of the holders the
// store's flags wait on, under the store's pmu.
type nameplates struct {
	owners map[string]int64 // holder → the connection id of its store's bell (its nameplate's owner)
	// Holders whose nameplate or bell was found not held: when to look
	// again, and the pause, which grows while they stay so.
	silent map[string]time.Time
	pause  map[string]time.Duration
	due    map[string]bool // looked up again after their pause (lookUpAfterPause)
}

// resolveChunk is the most nameplates one statement looks up.
const resolveChunk = 100

// target chooses the bell to wait on, by the connection id of its store:
// the current one while a flag of the store still waits on a holder of
// that store, else the bell of the store most of the store's flags wait
// on (the one whose first holder by name comes first on a tie), leaving
// out holders this store leads under (their releases wake its flags in
// process), holders found silent, and the bells helpers wait on. It looks
// up (IS_USED_LOCK) the nameplates of holders not known yet, then has
// helpers wait on the bells of the other stores (helpWith). It returns 0
// and when to look again when there is none.
func (w *watcher) target(ctx context.Context) (int64, time.Time, error) {
	s := w.s
	s.pmu.Lock()
	if w.stale() {
		s.pmu.Unlock()
		return 0, time.Time{}, errStopped
	}
	waited := s.waitedHolders()
	last := w.current
	for h := range waited {
		if last != 0 && s.plates.owners[h] == last {
			s.follow(last)
			wake := s.silentWake(waited)
			s.pmu.Unlock()
			return last, wake, nil
		}
	}
	var unknown []string
	for h := range waited {
		if _, ok := s.plates.owners[h]; !ok && !s.isSilent(h) {
			unknown = append(unknown, h)
		}
	}
	s.pmu.Unlock()
	sort.Strings(unknown)
	for len(unknown) > 0 {
		n := min(len(unknown), resolveChunk)
		if err := w.resolve(ctx, unknown[:n]); err != nil {
			return 0, time.Time{}, err
		}
		unknown = unknown[n:]
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if w.stale() {
		return 0, time.Time{}, errStopped
	}
	count, first := s.countByBell(waited)
	w.current = 0
	for id := range count {
		if s.helps(id) {
			continue
		}
		if w.current == 0 || count[id] > count[w.current] || count[id] == count[w.current] && first[id] < first[w.current] {
			w.current = id
		}
	}
	if w.current == 0 && last != 0 && !s.helps(last) && s.anySilent(waited) {
		// Every holder still waited on was found without its nameplate:
		// most likely new holders of the store waited on last, which
		// take their nameplates just after their first acquire returns.
		// Waiting on no bell would miss that store's releases; so the
		// watcher keeps its bell until their pause ends (see wait).
		w.current = last
	}
	s.follow(w.current)
	return w.current, s.silentWake(waited), nil
}

// countByBell counts, for each bell, the store's flags waiting on holders
// known to be of its store, from waited (flags per holder), and names the
// first of those holders by name. Called with s.pmu held.
func (s *Store) countByBell(waited map[string]int) (count map[int64]int, first map[int64]string) {
	count, first = make(map[int64]int), make(map[int64]string)
	for h, n := range waited {
		id, ok := s.plates.owners[h]
		if !ok || s.isSilent(h) {
			continue
		}
		count[id] += n
		if f, seen := first[id]; !seen || h < f {
			first[id] = h
		}
	}
	return count, first
}

// anySilent reports whether a holder of waited is in its pause. Called
// with s.pmu held.
func (s *Store) anySilent(waited map[string]int) bool {
	for h := range waited {
		if s.isSilent(h) {
			return true
		}
	}
	return false
}

// waitedHolders counts the store's flags waiting on each holder, leaving
// out the holders the store leads under, and forgets what was known of
// holders no flag waits on any more. Called with s.pmu held.
func (s *Store) waitedHolders() map[string]int {
	own := make(map[string]bool)
	for t := range s.leading {
		own[t.holder] = true
	}
	count := make(map[string]int)
	for _, name := range s.hub.Names() {
		if h, ok := s.waitsOn[name]; ok && !own[h] {
			count[h]++
		}
	}
	p := &s.plates
	for h := range p.owners {
		if count[h] == 0 {
			delete(p.owners, h)
		}
	}
	for h := range p.silent {
		if count[h] == 0 {
			delete(p.silent, h)
			delete(p.pause, h)
		}
	}
	return count
}

// isSilent reports whether holder's pause after a silent nameplate or
// bell still runs. Called with s.pmu held.
func (s *Store) isSilent(holder string) bool {
	until, quiet := s.plates.silent[holder]
	return quiet && time.Now().Before(until)
}

// silentWake is when the first pause of a waited holder ends, or an hour
// from now. Called with s.pmu held.
func (s *Store) silentWake(waited map[string]int) time.Time {
	wake := time.Now().Add(time.Hour)
	for h := range waited {
		if s.isSilent(h) {
			wake = minTime(wake, s.plates.silent[h])
		}
	}
	return wake
}

// silence starts or lengthens holder's pause: 0.1 s, then fourfold up to
// silentMax while it stays silent. It returns when the pause ends.
// Called with s.pmu held.
func (s *Store) silence(holder string) time.Time {
	p := s.knowledge()
	pause := min(max(p.pause[holder]*4, silentFirst), silentMax)
	p.pause[holder], p.silent[holder] = pause, time.Now().Add(pause)
	delete(p.owners, holder)
	return p.silent[holder]
}

// knowledge returns s.plates, its maps made. Called with s.pmu held.
func (s *Store) knowledge() *nameplates {
	p := &s.plates
	if p.owners == nil {
		p.owners, p.silent, p.pause, p.due = make(map[string]int64), make(map[string]time.Time), make(map[string]time.Duration), make(map[string]bool)
	}
	return p
}

// learn records the owners of the nameplates of holders just looked up:
// the connection of each one's store's bell, or a silence for a nameplate
// nobody holds (its holder crashed, closed, or has not taken it yet: a new
// holder takes it just after its first acquire returns). Called with
// s.pmu held.
func (s *Store) learn(owners map[string]int64) {
	for h, id := range owners {
		if id == 0 {
			s.silence(h)
			continue
		}
		s.knowledge().owners[h] = id
		delete(s.plates.silent, h) // held now, whatever an earlier look found
	}
}

// heard ends holder's pause, its store's bell having rung. Called with
// s.pmu held.
func (s *Store) heard(holder string) {
	delete(s.plates.pause, holder)
	delete(s.plates.silent, holder)
}

// connect takes the watcher's connection from the pool if it has none.
func (w *watcher) connect(ctx context.Context) error {
	if w.conn != nil {
		return nil
	}
	conn, err := w.s.db.Conn(ctx)
	if err != nil {
		return err
	}
	w.conn = conn
	w.s.watchStatements.Add(1)
	return conn.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&w.db)
}

// resolve looks up the owners of the nameplates of holders, in one
// statement on the watcher's connection, and records them (learn).
func (w *watcher) resolve(ctx context.Context, holders []string) error {
	if err := w.connect(ctx); err != nil {
		return err
	}
	w.s.watchStatements.Add(1)
	owners, err := lookUpNameplates(ctx, w.conn, w.db, holders)
	if err != nil {
		return err
	}
	w.s.pmu.Lock()
	w.s.learn(owners)
	w.s.pmu.Unlock()
	return nil
}

// lookUpNameplates returns the connection id of the owner of the
// nameplate of each of holders in the database db, 0 for one nobody
// holds, in one statement on q.
func lookUpNameplates(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, db string, holders []string) (map[string]int64, error) {
	cols := make([]string, len(holders))
	ids := make([]sql.NullInt64, len(holders))
	dest := make([]any, len(holders))
	for i, h := range holders {
		cols[i] = `IS_USED_LOCK('` + bellName(db, h) + `')`
		dest[i] = &ids[i]
	}
	if err := q.QueryRowContext(ctx, `SELECT `+strings.Join(cols, ", ")).Scan(dest...); err != nil {
		return nil, err
	}
	owners := make(map[string]int64, len(holders))
	for i, h := range holders {
		owners[h] = ids[i].Int64 // 0 when NULL
	}
	return owners, nil
}

// lookUpDuringWait has the nameplate of holder, which a flag of the store
// has just seen, looked up on a connection of the pool when the watcher
// waits and does not know it, so that retarget learns whether holder is
// of the store whose bell the watcher waits on (the watcher's own
// connection is busy in its GET_LOCK). One lookup runs at a time; holders
// seen meanwhile are looked up together next. Called with s.pmu held.
func (s *Store) lookUpDuringWait(holder string) {
	if s.waitCancel == nil {
		return
	}
	if _, known := s.plates.owners[holder]; known || s.isSilent(holder) {
		return
	}
	for t := range s.leading {
		if t.holder == holder {
			return // the store's own: its releases wake its flags in process
		}
	}
	if s.lookups == nil {
		s.lookups = make(map[string]bool)
	}
	s.lookups[holder] = true
	if !s.lookingUp && !s.closed {
		s.lookingUp = true
		s.lookers.Go(s.lookUp)
	}
}

// lookUp looks up the holders lookUpDuringWait queued, until none is left
// or the wait ends, and cuts the wait short (retarget) once no flag waits
// on a holder that may be of the store whose bell it waits on.
func (s *Store) lookUp() {
	for {
		s.pmu.Lock()
		if len(s.lookups) == 0 || s.waitCancel == nil {
			clear(s.lookups)
			s.lookingUp = false
			s.pmu.Unlock()
			return
		}
		holders := slices.Sorted(maps.Keys(s.lookups))
		holders = holders[:min(len(holders), resolveChunk)]
		for _, h := range holders {
			delete(s.lookups, h)
		}
		db := s.waitDB
		s.pmu.Unlock()
		ctx, cancel := context.WithTimeout(s.ctx, bellLookUpTimeout)
		s.watchStatements.Add(1)
		owners, err := lookUpNameplates(ctx, s.db, db, holders)
		cancel()
		s.pmu.Lock()
		if err != nil {
			s.lookingUp = false // the watcher looks them up after its wait
			s.pmu.Unlock()
			return
		}
		s.learn(owners)
		var silent []string
		for h, id := range owners {
			if id == 0 {
				silent = append(silent, h)
			}
		}
		s.lookUpAfterPause(silent)
		s.retarget()
		s.pmu.Unlock()
	}
}

// lookUpAfterPause has holders, just found silent, looked up again on the
// pool (lookUpDuringWait) when the first of their pauses ends, if the
// watcher waits then and a flag still waits on them: a new holder takes
// its nameplate just after its first acquire returns, and a store
// restarted under the same holder name takes it again. A holder already
// due for such a lookup is left out. Called with s.pmu held.
func (s *Store) lookUpAfterPause(holders []string) {
	p := s.knowledge()
	var due []string
	at := time.Now().Add(silentMax)
	for _, h := range holders {
		if !p.due[h] && s.isSilent(h) {
			p.due[h] = true
			due = append(due, h)
			at = minTime(at, p.silent[h])
		}
	}
	if len(due) == 0 {
		return
	}
	time.AfterFunc(time.Until(at), func() {
		s.pmu.Lock()
		defer s.pmu.Unlock()
		waited := s.waitedHolders()
		var later []string
		for _, h := range due {
			delete(s.plates.due, h)
			switch {
			case waited[h] == 0:
			case s.isSilent(h):
				later = append(later, h) // a longer pause than the first
			default:
				s.lookUpDuringWait(h)
			}
		}
		s.lookUpAfterPause(later)
	})
}

// errBellRefused stops the watcher: GET_LOCK returned NULL.
var errBellRefused = errors.New("GET_LOCK returned NULL")

// errRetarget ends a wait cut short by retarget.
var errRetarget = errors.New("no flag waits on a holder of the store of this bell any more")

// retarget cuts the watcher's wait short when no flag of the store waits
// on a holder of the store whose bell it waits on any more (a flag took
// the row over, learned of another holder, or was closed), so that it
// waits on the bell of a store they now wait on. A holder not looked up
// yet is presumed to be of that store until the next ring (the flags of
// one process, under default process names, each have their own holder
// name, learned one after the other), and so is one whose nameplate was
// found free, until its pause ends (a new holder takes its nameplate just
// after its first acquire returns). The driver then closes the
// connection, and the watcher takes a new one: this happens only when
// the holders change without a ring. It also has helpers started and
// stopped (manageHelpers). Called with s.pmu held.
func (s *Store) retarget() {
	if s.helpers != nil {
		kick(s.helpers.kick)
	}
	if s.waitCancel == nil {
		return
	}
	for _, name := range s.hub.Names() {
		h, ok := s.waitsOn[name]
		if !ok {
			continue
		}
		if owner, known := s.plates.owners[h]; !known || owner == s.waitID {
			return
		}
	}
	s.waitCancel()
	s.waitCancel = nil
}

// wait waits up to bellWait on the bell of the store whose bell
// connection has the id id. When the bell rings, it passes the lock on at
// once and wakes the flags whose row became free, whichever holder
// released it. A bell granted at once is not held: the watcher looks at
// the rows once, leaves its holders alone for a while, then looks their
// nameplates up again. It returns an error when the connection or the
// server failed.
func (w *watcher) wait(ctx context.Context, id int64) error {
	if err := w.connect(ctx); err != nil {
		return err
	}
	s := w.s
	waitFor := w.waitFor
	if waitFor == 0 {
		waitFor = bellWait
	}
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.pmu.Lock()
	var holders []string
	for h, owner := range s.plates.owners {
		if owner == id {
			holders = append(holders, h)
		}
	}
	for h, until := range s.plates.silent {
		if s.isSilent(h) {
			// Known: its nameplate was free. Presumed of this bell until
			// its pause ends (see retarget); the wait ends then, so that
			// target looks its nameplate up again.
			waitFor = min(waitFor, max(time.Until(until).Round(time.Second), time.Second))
		}
	}
	if w.stale() {
		s.pmu.Unlock()
		return errStopped
	}
	s.waitCancel, s.waitID, s.waitDB = cancel, id, w.db
	for _, n := range s.hub.Names() { // holders seen since target() looked
		if h, ok := s.waitsOn[n]; ok {
			s.lookUpDuringWait(h)
		}
	}
	s.retarget() // a change since target() chose it
	s.pmu.Unlock()
	used, got, err := w.hear(waitCtx, id, waitFor)
	s.pmu.Lock()
	if !w.stale() {
		s.waitCancel = nil
	}
	s.pmu.Unlock()
	if err != nil && waitCtx.Err() != nil && ctx.Err() == nil {
		return errRetarget
	}
	if err != nil || !got {
		return err // nothing released for waitFor when nil
	}
	s.pmu.Lock()
	for _, h := range holders {
		if used {
			s.heard(h)
		} else {
			s.silence(h)
		}
	}
	s.pmu.Unlock()
	if !used {
		w.current = 0
		// The store may have given its bell up right after its last
		// release, while the watcher was looking after the ring before:
		// look once more.
		return w.look(ctx)
	}
	s.watchRings.Add(1)
	return w.look(ctx)
}

// hear waits up to waitFor on the bell of the store whose bell
// connection has the id id, on the watcher's connection. It reports
// whether anyone held the bell when the wait began (IS_USED_LOCK is
// evaluated first) and whether it was granted; when granted, it passes
// the bell on at once (RELEASE_LOCK), so that every waiting process is
// granted in turn. A wait cut after t by a timeout of the client
// (readTimeout in the DSN) or the server (max_statement_time) makes later
// waits end first, with half of t to spare for a loaded machine's delays.
func (w *watcher) hear(ctx context.Context, id int64, waitFor time.Duration) (used, got bool, err error) {
	name := storeBellName(id)
	w.s.watchStatements.Add(1)
	began := time.Now()
	var granted sql.NullInt64
	err = w.conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT IS_USED_LOCK('%s') IS NOT NULL, GET_LOCK('%[1]s', %d)`,
		name, int(waitFor.Seconds()))).Scan(&used, &granted)
	if waited := time.Since(began); err != nil && ctx.Err() == nil && waited >= 2*time.Second && !refused(err) {
		w.waitFor = max(waited/2, time.Second).Truncate(time.Second)
	}
	switch {
	case err != nil:
		return false, false, err
	case !granted.Valid:
		return false, false, errBellRefused
	case granted.Int64 == 0:
		return used, false, nil
	}
	w.s.watchStatements.Add(1)
	var released sql.NullInt64
	if err := w.conn.QueryRowContext(ctx, `SELECT RELEASE_LOCK('`+name+`')`).Scan(&released); err != nil {
		return false, false, err
	}
	return used, true, nil
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
