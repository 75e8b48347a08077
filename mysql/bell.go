package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dbflag/leadership"
)

// The bell is the holder side of the cross-process release hint (see
// Release notifications in the package documentation). While flags of a
// Store lead, the store holds, on one connection of its pool taken for the
// purpose, two kinds of user-level locks (GET_LOCK; a connection may hold
// many):
//
//   - its bell, one per store, named after the connection's
//     CONNECTION_ID (storeBellName): right after a [Store.Release]
//     commits, the store rings it (RELEASE_LOCK, which grants the lock to
//     the watchers of other processes waiting on it one after the other,
//     then GET_LOCK again while it still leads), whichever holder name
//     released;
//   - a nameplate per holder name it leads under (bellName), never rung:
//     a watcher that sees the holder name in a row learns from the
//     nameplate's owner (IS_USED_LOCK) the connection, hence the bell, of
//     the store that leads under it.
//
// So every flag of a process that leads under default process names (one
// per flag) is followed through one bell. Nothing is sent while nothing
// is released. The connection returns to the pool once the store leads
// nothing (its last term released, lost or past its lease).

const (
	// bellRetake is how long the bell waits to take its lock back after a
	// ring, while the watchers of other processes pass it along.
	bellRetake = 2 * time.Second
	// bellRetry is the first wait before the bell tries again after its
	// connection failed or the server refused the lock; it doubles up to
	// bellRetryMax.
	bellRetry    = 5 * time.Second
	bellRetryMax = time.Minute
)

// bellName is the name of the nameplate of holder in the database db: a
// hash, since lock names are limited to 64 characters, of both
// (user locks are server-wide), with their lengths so that no two pairs
// share a name.
func bellName(db, holder string) string {
	h := sha256.New()
	for _, s := range []string{db, holder} {
		var n [8]byte
		for i := range n {
			n[i] = byte(uint64(len(s)) >> (8 * i))
		}
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return "leadership/bell/" + hex.EncodeToString(h.Sum(nil))[:40]
}

// storeBellName is the name of the bell of the store whose bell
// connection has the CONNECTION_ID id: connection ids are unique on a
// server while the connection lives, as user-level locks are server-wide.
func storeBellName(id int64) string {
	return "leadership/bell/store/" + strconv.FormatInt(id, 10)
}

// The statements on bells are written out, without parameters, so that
// each is one round trip whatever the DSN's interpolateParams (a
// parameter would cost a prepare, an execute and a close): a bell's name
// has only letters, digits and slashes (bellName).

// term is a flag this store leads: its name and holder.
type term struct{ name, holder string }

// observe records the outcome of an acquire attempt: the terms the store
// leads (for its bell) and the holders its losing flags wait on (for its
// watcher).
func (s *Store) observe(req leadership.Request, res leadership.Result) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if s.leading == nil {
		s.leading = make(map[term]time.Time)
		s.waitsOn = make(map[string]string)
	}
	t := term{req.Name, req.Holder}
	if res.Acquired {
		_, known := s.leading[t]
		s.leading[t] = time.Now().Add(req.Lease)
		if !known {
			s.startBell()
		}
	} else if _, led := s.leading[t]; led {
		delete(s.leading, t) // lost: the bell is given up
		kick(s.bellKick)
	}
	was := s.waitsOn[req.Name]
	if !res.Acquired && res.Holder != "" && res.Holder != req.Holder {
		s.waitsOn[req.Name] = res.Holder
	} else {
		delete(s.waitsOn, req.Name)
	}
	if now, ok := s.waitsOn[req.Name]; now != was {
		kick(s.watchKick)
		if ok {
			s.lookUpDuringWait(now)
		}
		s.retarget()
	}
}

// released records that the store's Release of the term of holder on
// name committed, and rings the store's bell if it changed the row.
func (s *Store) released(name, holder string, changed bool) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	delete(s.leading, term{name, holder})
	s.ring = s.ring || changed
	s.startBell()
}

// startBell starts the bell's goroutine if it is not running, or wakes
// it. Called with s.pmu held.
func (s *Store) startBell() {
	if s.bellDone != nil {
		kick(s.bellKick)
		return
	}
	if s.closed || !poolAllowsPush(s.db) {
		return
	}
	s.bellKick = make(chan struct{}, 1)
	s.bellDone = make(chan struct{})
	go s.ringBells(s.bellKick, s.bellDone)
}

// poolAllowsPush reports whether the pool leaves room for the bell's and
// the watcher's connections: unlimited, or at least three connections, so
// that one stays for the flags' statements.
func poolAllowsPush(db *sql.DB) bool {
	n := db.Stats().MaxOpenConnections
	return n == 0 || n >= 3
}

// kick wakes the goroutine that reads ch without blocking.
func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// ringBells keeps the store's bell and the nameplates of the holders it
// leads under, rings the bell after releases, and exits once it leads
// nothing and holds no lock.
func (s *Store) ringBells(kicked <-chan struct{}, done chan struct{}) {
	defer close(done)
	b := bell{s: s, held: make(map[string]bool), retakeAt: make(map[string]time.Time), retakePause: make(map[string]time.Duration)}
	defer b.drop()
	var (
		retryAt time.Time
		backoff = bellRetry
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		s.pmu.Lock()
		wanted := make(map[string]bool)
		next := now.Add(time.Hour)
		for t, until := range s.leading {
			if until.After(now) {
				wanted[t.holder] = true
				next = minTime(next, until)
			} else {
				delete(s.leading, t)
			}
		}
		ring := s.ring
		s.ring = false
		if len(wanted) == 0 && !b.holding() || s.closed {
			s.bellDone = nil
			s.pmu.Unlock()
			return
		}
		s.pmu.Unlock()
		if !now.Before(retryAt) {
			retryAt = time.Time{}
			if err := b.sync(s.ctx, wanted, ring); err != nil {
				b.drop()
				retryAt = time.Now().Add(backoff)
				backoff = min(2*backoff, bellRetryMax)
			} else {
				backoff = bellRetry
			}
		}
		if !retryAt.IsZero() {
			next = minTime(next, retryAt)
		}
		for _, at := range b.retakeAt {
			next = minTime(next, at)
		}
		timer.Reset(time.Until(next))
		select {
		case <-s.ctx.Done():
			return
		case <-kicked:
		case <-timer.C:
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// bell is the connection of ringBells and the locks it holds.
type bell struct {
	s    *Store
	conn *sql.Conn
	db   string // DATABASE() of the connection
	id   int64  // CONNECTION_ID() of the connection: names the store's bell
	// rung: the store's bell is held; held: holder → its nameplate is held.
	rung bool
	held map[string]bool
	// A lock another connection holds (watchers passing the bell along,
	// or another process leading under the same holder name) is tried
	// again after a pause of 1 s, doubling up to bellRetryMax; the bell's
	// own under the key "".
	retakeAt    map[string]time.Time
	retakePause map[string]time.Duration
}

// holding reports whether the connection holds a lock.
func (b *bell) holding() bool { return b.rung || len(b.held) > 0 }

// sync rings the store's bell if ring (gives it up if nothing is wanted),
// gives up the nameplates no longer wanted, and takes the bell and the nameplates wanted: the bell first,
// so that a watcher that finds a nameplate finds the bell held.
func (b *bell) sync(ctx context.Context, wanted map[string]bool, ring bool) error {
	switch {
	case b.rung && len(wanted) == 0:
		b.rung = false
		if err := b.release(ctx, storeBellName(b.id)); err != nil {
			return err
		}
	case b.rung && ring:
		// RELEASE_LOCK grants the bell to the watchers waiting on it, one
		// after the other, and the GET_LOCK of the same statement queues
		// behind them: the bell is never left free between a ring and its
		// retake, so a watcher that waits again after its look waits for
		// the next ring instead of finding the bell silent.
		var released, got sql.NullInt64
		name := storeBellName(b.id)
		if err := b.conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT RELEASE_LOCK('%s'), GET_LOCK('%[1]s', %d)`,
			name, int(bellRetake.Seconds()))).Scan(&released, &got); err != nil {
			return err
		}
		if b.rung = got.Valid && got.Int64 == 1; !b.rung {
			b.retakeAt[""] = time.Now().Add(time.Second) // watchers still pass it along
		}
	}
	for holder := range b.held {
		if !wanted[holder] {
			delete(b.held, holder)
			if err := b.release(ctx, bellName(b.db, holder)); err != nil {
				return err
			}
		}
	}
	for key := range b.retakeAt {
		if key != "" && !wanted[key] {
			delete(b.retakeAt, key)
			delete(b.retakePause, key)
		}
	}
	if len(wanted) > 0 && b.conn == nil {
		conn, err := b.s.db.Conn(ctx)
		if err != nil {
			return err
		}
		b.conn = conn
		if err := conn.QueryRowContext(ctx, `SELECT DATABASE(), CONNECTION_ID()`).Scan(&b.db, &b.id); err != nil {
			return err
		}
	}
	if len(wanted) > 0 && !b.rung {
		got, err := b.take(ctx, "", storeBellName(b.id), bellRetake)
		if err != nil {
			return err
		}
		b.rung = got
	}
	for holder := range wanted {
		if b.held[holder] {
			continue
		}
		got, err := b.take(ctx, holder, bellName(b.db, holder), 0)
		if err != nil {
			return err
		}
		b.held[holder] = got
		if !got {
			delete(b.held, holder)
		}
	}
	if !b.holding() && b.conn != nil {
		b.conn.Close() // holds no lock: back to the pool
		b.conn = nil
	}
	return nil
}

// take takes the lock name, under key in the retry pauses, waiting up to
// wait for it, unless its pause runs. It reports whether it holds it.
func (b *bell) take(ctx context.Context, key, name string, wait time.Duration) (bool, error) {
	if time.Now().Before(b.retakeAt[key]) {
		return false, nil
	}
	var got sql.NullInt64
	if err := b.conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT GET_LOCK('%s', %d)`, name, int(wait.Seconds()))).Scan(&got); err != nil {
		return false, err
	}
	if !got.Valid {
		return false, errors.New("GET_LOCK returned NULL")
	}
	if got.Int64 == 1 {
		delete(b.retakeAt, key)
		delete(b.retakePause, key)
		return true, nil
	}
	pause := min(max(2*b.retakePause[key], time.Second), bellRetryMax)
	b.retakePause[key], b.retakeAt[key] = pause, time.Now().Add(pause)
	return false, nil
}

// release gives up the lock name.
func (b *bell) release(ctx context.Context, name string) error {
	var released sql.NullInt64
	return b.conn.QueryRowContext(ctx, `SELECT RELEASE_LOCK('`+name+`')`).Scan(&released)
}

// drop closes the connection without returning it to the pool, which
// frees every lock it holds.
func (b *bell) drop() {
	if b.conn == nil {
		return
	}
	if b.holding() {
		_ = b.conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	b.conn.Close()
	b.conn = nil
	b.rung = false
	clear(b.held)
}
