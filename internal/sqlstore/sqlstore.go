// Package sqlstore holds the plumbing the SQL stores share: retrying a
// statement once after a transient failure, quoting a flag's name in an
// error, reading the flag table's columns and golang-migrate's version row.
// Each store keeps its own SQL and decides which errors are transient.
package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// retryPause is how long RetryOnce waits before its second attempt.
const retryPause = 5 * time.Millisecond

// RetryOnce runs fn and, when transient reports that its error left no
// effect behind (a deadlock or serialization failure the server rolled
// back), runs it once more after a short pause, unless ctx ends first.
// Any other error is returned as it is.
func RetryOnce(ctx context.Context, transient func(error) bool, fn func() error) error {
	err := fn()
	if err == nil || !transient(err) {
		return err
	}
	select {
	case <-ctx.Done():
		return err
	case <-time.After(retryPause):
	}
	return fn()
}

// Quote quotes a flag's name for an error message.
func Quote(name string) string { return fmt.Sprintf("%q", name) }

// Rows is what both database/sql's and pgx's result sets offer.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// Columns reads rows of (column name, data type), as a store's query of
// information_schema.columns returns them, into a map in lower case for
// [github.com/dbflag/leadership/internal/schema.Check]. The caller closes
// rows.
func Columns(rows Rows) (map[string]string, error) {
	got := map[string]string{}
	for rows.Next() {
		var col, typ string
		if err := rows.Scan(&col, &typ); err != nil {
			return nil, err
		}
		got[strings.ToLower(col)] = strings.ToLower(typ)
	}
	return got, rows.Err()
}

// Version reads golang-migrate's version row with scan, which scans the
// store's "SELECT version, dirty" into its arguments. It reports version 0
// when absent says the error means there is no version table or no row
// yet; other errors are returned as they are, for the store to describe.
func Version(scan func(dest ...any) error, absent func(error) bool) (version uint, dirty bool, err error) {
	var v int64
	err = scan(&v, &dirty)
	switch {
	case err == nil:
		return uint(v), dirty, nil
	case absent(err):
		return 0, false, nil
	}
	return 0, false, err
}
