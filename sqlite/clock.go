package sqlite

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/dbflag/leadership"
)

// The SQL functions through which every statement of the store reads its
// clock. SQLite calls them while it executes the statement, after the
// statement has taken the write lock; each statement reads them once, in a
// materialized common table expression (see [clockCTE]). Their argument
// selects the clock: 0 is the host's (see [hostClock]), other keys are
// clocks given by tests.
const (
	fnHost = "leadership_host_ms"
	fnWall = "leadership_wall_ms"
)

// clockCTE reads both clocks once at the start of a statement, as c.host
// and c.wall; ?N is the parameter that carries the clock's key. MATERIALIZED
// makes SQLite evaluate the functions once, so every reference to c within
// the statement sees the same instant, as with SQLite's own 'now'.
func clockCTE(n int) string {
	return fmt.Sprintf(`WITH c(host, wall) AS MATERIALIZED (SELECT %s(?%d), %s(?%d)) `, fnHost, n, fnWall, n)
}

// clock is what the store reads time from.
type clock interface {
	// bootID names the period during which hostMillis runs without a
	// break: on Linux the kernel's boot ID.
	bootID() (string, error)
	// hostMillis reads a clock in milliseconds that every process on the
	// host reads alike and that never steps, within one boot ID.
	hostMillis() int64
	// wallMillis reads the wall clock in Unix milliseconds; it is used
	// only to report instants and for rows that older versions of this
	// package wrote.
	wallMillis() int64
}

// timebase is a clock as the store uses it: registered under a key for
// the SQL functions, with its boot ID, and with the offset that turns host
// milliseconds into the instants reported to callers.
type timebase struct {
	c    clock
	key  int64
	boot string
	// anchor is wall - host in milliseconds as last adopted, or
	// math.MinInt64 before the first reading.
	anchor atomic.Int64
}

// anchorSlack is how far the wall clock may move against the host clock
// before reported instants follow it. Below it, the instants a row reports
// stay the same from one read to the next, in every store of the process.
const anchorSlack = time.Second

var (
	timebases sync.Map // key (int64) → *timebase
	nextKey   atomic.Int64
	// system is the host clock of this process, shared by every store that
	// was not given another, so that they all report the same instants.
	system = sync.OnceValues(func() (*timebase, error) { return register(hostClock{}, 0) })
	// registered is the error of registering the SQL functions.
	registered = sync.OnceValue(func() error {
		return errors.Join(
			msqlite.RegisterScalarFunction(fnHost, 1, func(_ *msqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
				tb, err := lookup(args)
				if err != nil {
					return nil, err
				}
				return tb.c.hostMillis(), nil
			}),
			msqlite.RegisterScalarFunction(fnWall, 1, func(_ *msqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
				tb, err := lookup(args)
				if err != nil {
					return nil, err
				}
				return tb.c.wallMillis(), nil
			}))
	})
)

// The functions must exist before the first connection opens: modernc
// adds them to new connections only.
func init() {
	_ = registered()
}

// newTimebase registers c under a fresh key.
func newTimebase(c clock) (*timebase, error) {
	return register(c, nextKey.Add(1))
}

func register(c clock, key int64) (*timebase, error) {
	if err := registered(); err != nil {
		return nil, fmt.Errorf("sqlite: register the clock functions: %w", err)
	}
	boot, err := c.bootID()
	if err != nil {
		return nil, fmt.Errorf("sqlite: host clock: %w", err)
	}
	tb := &timebase{c: c, key: key, boot: boot}
	tb.anchor.Store(math.MinInt64)
	timebases.Store(key, tb)
	return tb, nil
}

func lookup(args []driver.Value) (*timebase, error) {
	key, ok := args[0].(int64)
	if !ok {
		return nil, fmt.Errorf("%s: clock key %v is not an integer", fnHost, args[0])
	}
	tb, ok := timebases.Load(key)
	if !ok {
		return nil, fmt.Errorf("%s: no clock registered under key %d", fnHost, key)
	}
	return tb.(*timebase), nil
}

// instant is one reading of both clocks within a statement.
type instant struct{ host, wall int64 }

// observe adopts the offset between the wall and the host clock seen at
// now, when it is the first or has moved by more than [anchorSlack].
func (tb *timebase) observe(now instant) {
	off := now.wall - now.host
	for {
		a := tb.anchor.Load()
		if a != math.MinInt64 && off-a <= anchorSlack.Milliseconds() && a-off <= anchorSlack.Milliseconds() {
			return
		}
		if tb.anchor.CompareAndSwap(a, off) {
			return
		}
	}
}

// at turns host milliseconds into a reported instant: close to the wall
// clock (within [anchorSlack] when it last observed a reading), and moving
// with the host clock, so that differences between instants are host-clock
// durations.
func (tb *timebase) at(host int64) time.Time {
	return time.UnixMilli(host + tb.anchor.Load())
}

// row is a flag's row as stored.
type row struct {
	holder          string
	version         int64
	renewed, expiry int64 // wall clock, written for older versions
	boot            string
	hostRenewed     int64
	hostExpiry      int64
}

// record reports r at now: a row of this boot by its host-clock instants;
// a row that an older version wrote (boot "") by its wall-clock instants
// taken relative to now, since that is how its expiry is judged; a row of
// an earlier boot as expired at the latest now.
func (tb *timebase) record(name string, r row, now instant) leadership.Record {
	rec := leadership.Record{Name: name, Holder: r.holder, Version: r.version}
	renewed, expiry := r.hostRenewed, r.hostExpiry
	if r.boot != tb.boot {
		renewed, expiry = now.host+r.renewed-now.wall, now.host+r.expiry-now.wall
		if r.boot != "" {
			renewed, expiry = min(renewed, now.host), min(expiry, now.host)
		}
	}
	rec.RenewedAt, rec.ExpiresAt = tb.at(renewed), tb.at(expiry)
	return rec
}
