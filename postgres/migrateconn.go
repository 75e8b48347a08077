package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// migrationDB is a *sql.DB over the pool for golang-migrate, with a
// function that gives back to the pool every connection golang-migrate
// took and kept: its pgx driver keeps one when it fails after taking it
// (WithInstance, when it cannot read or create its version table, returns
// without closing it), and a connection not given back keeps pool.Close
// from ever returning. Such a connection is closed, not reused, since it
// may hold golang-migrate's session lock. Call the function once
// golang-migrate is done, whatever the outcome; closing the *sql.DB
// leaves the pool open.
//
// golang-migrate waits for its session lock without a context
// (migrationLockQuery, in context.Background()); on these connections
// that statement runs under lockCtx instead, so that Migrate ends with
// its context while another session holds the lock, and the returned
// *takenConns reports whether it did (cut).
func migrationDB(lockCtx context.Context, pool *pgxpool.Pool) (*sql.DB, *takenConns, func()) {
	t := &takenConns{Connector: stdlib.GetPoolConnector(pool), lockCtx: lockCtx}
	db := sql.OpenDB(t)
	db.SetMaxIdleConns(0) // as stdlib.OpenDBFromPool: idle connections belong in the pool
	return db, t, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		for _, c := range t.open {
			if !c.closed {
				_ = c.Conn.Conn().Close(context.Background())
				_ = c.Conn.Close() // gives the closed connection back: the pool drops it
			}
		}
		t.open = nil
	}
}

// takenConns is a connector that remembers the connections it hands out.
type takenConns struct {
	driver.Connector
	lockCtx context.Context
	mu      sync.Mutex
	open    []*takenConn
	cut     atomic.Bool // a wait for the lock ended with lockCtx
}

// migrationLockQuery is the statement by which golang-migrate's pgx driver
// takes its session lock, waiting for it as long as another session holds
// it.
const migrationLockQuery = `SELECT pg_advisory_lock($1)`

func (t *takenConns) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := t.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	tc := &takenConn{Conn: c.(*stdlib.Conn), taken: t}
	t.mu.Lock()
	t.open = append(t.open, tc)
	t.mu.Unlock()
	return tc, nil
}

// takenConn is pgx's driver connection (all its methods), knowing whether
// database/sql closed it, and running golang-migrate's lock statement
// under the lock context.
type takenConn struct {
	*stdlib.Conn
	taken  *takenConns
	closed bool
}

func (c *takenConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if query != migrationLockQuery {
		return c.Conn.ExecContext(ctx, query, args)
	}
	res, err := c.Conn.ExecContext(c.taken.lockCtx, query, args)
	if err != nil && c.taken.lockCtx.Err() != nil {
		c.taken.cut.Store(true)
	}
	return res, err
}

func (c *takenConn) Close() error {
	c.taken.mu.Lock()
	c.closed = true
	c.taken.mu.Unlock()
	return c.Conn.Close()
}
