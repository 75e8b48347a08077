package sqlite

import (
	"errors"
	"fmt"
	"strings"
)

// SQLite's errors, as modernc.org/sqlite reports them: the store reads
// the primary result code through the interface its *Error implements,
// and the messages of the errors that share a code with others.

// busy reports whether err is SQLITE_BUSY or one of its extended codes
// (SQLITE_BUSY_SNAPSHOT, SQLITE_BUSY_RECOVERY).
func busy(err error) bool {
	var e interface{ Code() int }
	return errors.As(err, &e) && e.Code()&0xff == 5
}

// noTable reports whether err says that a table does not exist.
func noTable(err error) bool { return strings.Contains(err.Error(), "no such table") }

// inTransaction reports whether err is a BEGIN refused because the
// connection is inside a transaction already.
func inTransaction(err error) bool { return strings.Contains(err.Error(), "within a transaction") }

// noTransaction reports whether err is a ROLLBACK refused because the
// connection is inside no transaction.
func noTransaction(err error) bool { return strings.Contains(err.Error(), "no transaction is active") }

// describe wraps err with what failed and, for a missing table, how to fix
// it.
func describe(what string, err error) error {
	if noTable(err) {
		return fmt.Errorf("sqlite: %s: table missing: run the migrations (Build does unless Migrate(false); or leadership migrate): %w", what, err)
	}
	return fmt.Errorf("sqlite: %s: %w", what, err)
}
