package sqlstore

import (
	"context"
	"database/sql"

	"github.com/dbflag/leadership/internal/notify"
)

// Querier is what FreeRows reads through: a *sql.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// FreeRows lists the rows of leadership_flags that no process holds, as
// name → version: the input of a release watcher (the sqlite and mysql
// stores), which wakes the flags whose row has become free.
func FreeRows(ctx context.Context, q Querier) (map[string]int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT name, version FROM leadership_flags WHERE holder = ''`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	free := make(map[string]int64)
	for rows.Next() {
		var name string
		var version int64
		if err := rows.Scan(&name, &version); err != nil {
			return nil, err
		}
		free[name] = version
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return free, nil
}

// WakeFreed notifies the flags subscribed to hub whose row is free in now
// and was not free at that version in before (a release since the last
// look; every free row when before is nil).
func WakeFreed(hub *notify.Hub, before, now map[string]int64) {
	for _, name := range hub.Names() {
		version, free := now[name]
		if !free {
			continue
		}
		if was, seen := before[name]; before == nil || !seen || was != version {
			hub.Notify(name)
		}
	}
}
