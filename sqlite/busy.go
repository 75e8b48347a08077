package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strconv"
	"time"
)

// A write waits for SQLite's write lock in the busy handler, up to the
// connection's busy timeout (10 s in the DSN [Open] builds), and the
// driver cannot cut that wait short: the end of the statement's context
// interrupts the statement, but not a busy handler's sleep. An attempt
// under a flag's Timeout would then overrun it while another process
// holds the lock: Timeout 100 ms, and the attempt returned when the other
// process let the lock go a second later. So each write of the store
// first lowers the connection's busy timeout to what is left of its
// context, and sets it back afterwards.

// boundBusyWait lowers the busy timeout of conn to the time left before
// ctx's deadline, when that is shorter, and returns the function that
// sets it back (nil when there is nothing to set back). A connection
// whose timeout may have been lowered and cannot be set back (the
// lowering or the setting back failed) is discarded rather than returned
// to the pool with a shorter wait.
func boundBusyWait(ctx context.Context, conn *sql.Conn) (restore func(), err error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return nil, nil
	}
	var busyMillis int64
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busyMillis); err != nil {
		return nil, err
	}
	left := max((time.Until(deadline) + time.Millisecond - 1).Milliseconds(), 0)
	if busyMillis <= left {
		return nil, nil
	}
	if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = "+strconv.FormatInt(left, 10)); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // it may have taken effect
		return nil, err
	}
	return func() {
		if _, err := conn.ExecContext(context.Background(), "PRAGMA busy_timeout = "+strconv.FormatInt(busyMillis, 10)); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}, nil
}
