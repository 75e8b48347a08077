package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"

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
func migrationDB(pool *pgxpool.Pool) (*sql.DB, *takenConns, func()) {
	t := &takenConns{Connector: stdlib.GetPoolConnector(pool)}
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
	mu   sync.Mutex
	open []*takenConn
}

func (t *takenConns) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := t.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	tc := &takenConn{Conn: c.(*stdlib.Conn), mu: &t.mu}
	t.mu.Lock()
	t.open = append(t.open, tc)
	t.mu.Unlock()
	return tc, nil
}

// pids returns the server processes of the connections t handed out that
// database/sql has not closed.
func (t *takenConns) pids() []int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var pids []int32
	for _, c := range t.open {
		if !c.closed {
			pids = append(pids, int32(c.Conn.Conn().PgConn().PID()))
		}
	}
	return pids
}

// takenConn is pgx's driver connection (all its methods), knowing whether
// database/sql closed it.
type takenConn struct {
	*stdlib.Conn
	mu     *sync.Mutex
	closed bool
}

func (c *takenConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return c.Conn.Close()
}
