package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/dbflag/leadership"
)

// The bell is the holder side of the cross-process release hint (see
// Release notifications in the package documentation). While flags of a
// Store lead, the store holds, on one connection of its pool taken for
// the purpose, a user-level lock per holder name it leads under (GET_LOCK;
// a connection may hold many). Right after a [Store.Release] commits, the
// store rings the holder's bell: RELEASE_LOCK, which grants the lock to the
// watchers of other processes waiting on it one after the other, then
// GET_LOCK again if the holder still leads a flag. Nothing is sent while
// nothing is released. The connection returns to the pool once the store
// leads nothing (its last term released, lost or past its lease).

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

// bellName is the name of the user-level lock of holder in the database
// db: a hash, since lock names are limited to 64 characters, of both
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
	if s.waitsOn[req.Name] != was {
		kick(s.watchKick)
		s.retarget()
	}
}

// released records that the store's Release of the term of holder on
// name committed, and rings holder's bell if it changed the row.
func (s *Store) released(name, holder string, changed bool) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	delete(s.leading, term{name, holder})
	if changed {
		if s.rings == nil {
			s.rings = make(map[string]bool)
		}
		s.rings[holder] = true
	}
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

// ringBells keeps the bells of the holders the store leads under, rings
// those released, and exits once it leads nothing and holds no bell.
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
		rings := s.rings
		s.rings = nil
		if len(wanted) == 0 && len(b.held) == 0 || s.closed {
			s.bellDone = nil
			s.pmu.Unlock()
			return
		}
		s.pmu.Unlock()
		if !now.Before(retryAt) {
			retryAt = time.Time{}
			if err := b.sync(s.ctx, wanted, rings); err != nil {
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
	db   string          // DATABASE() of the connection
	held map[string]bool // holder → its lock is held
	// A lock another connection holds (watchers passing it along, or
	// another process leading under the same holder name) is tried again
	// after a pause of 1 s, doubling up to bellRetryMax.
	retakeAt    map[string]time.Time
	retakePause map[string]time.Duration
}

// sync rings the bells of rings that are held, gives up those no longer
// wanted and takes those wanted.
func (b *bell) sync(ctx context.Context, wanted, rings map[string]bool) error {
	for holder := range b.held {
		if !wanted[holder] || rings[holder] {
			if err := b.release(ctx, holder); err != nil {
				return err
			}
		}
	}
	for holder := range b.retakeAt {
		if !wanted[holder] {
			delete(b.retakeAt, holder)
			delete(b.retakePause, holder)
		} else if rings[holder] {
			delete(b.retakeAt, holder) // a release: try at once
		}
	}
	for holder := range wanted {
		if b.held[holder] || time.Now().Before(b.retakeAt[holder]) {
			continue
		}
		if b.conn == nil {
			conn, err := b.s.db.Conn(ctx)
			if err != nil {
				return err
			}
			b.conn = conn
			if err := conn.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&b.db); err != nil {
				return err
			}
		}
		var got sql.NullInt64
		if err := b.conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT GET_LOCK('%s', %d)`, bellName(b.db, holder), int(bellRetake.Seconds()))).Scan(&got); err != nil {
			return err
		}
		if !got.Valid {
			return errors.New("GET_LOCK returned NULL")
		}
		if got.Int64 == 1 {
			b.held[holder] = true
			delete(b.retakeAt, holder)
			delete(b.retakePause, holder)
			continue
		}
		pause := min(max(2*b.retakePause[holder], time.Second), bellRetryMax)
		b.retakePause[holder], b.retakeAt[holder] = pause, time.Now().Add(pause)
	}
	if len(b.held) == 0 && b.conn != nil {
		b.conn.Close() // holds no lock: back to the pool
		b.conn = nil
	}
	return nil
}

// release gives up the lock of holder.
func (b *bell) release(ctx context.Context, holder string) error {
	delete(b.held, holder)
	var released sql.NullInt64
	return b.conn.QueryRowContext(ctx, `SELECT RELEASE_LOCK('`+bellName(b.db, holder)+`')`).Scan(&released)
}

// drop closes the connection without returning it to the pool, which
// frees every lock it holds.
func (b *bell) drop() {
	if b.conn == nil {
		return
	}
	if len(b.held) > 0 {
		_ = b.conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	b.conn.Close()
	b.conn = nil
	clear(b.held)
}
