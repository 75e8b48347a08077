package postgres

import (
	"errors"
	"fmt"
	"strings"
)

// SQLSTATE codes the store treats specially.
const (
	codeSerializationFailure  = "40001"
	codeDeadlockDetected      = "40P01"
	codeInsufficientPrivilege = "42501"
	codeReadOnlyTransaction   = "25006"
	// On a standby, the acquire statement's read of the unlogged
	// incarnation table fails with this code ("cannot access temporary or
	// unlogged relations during recovery") before any write is refused.
	codeFeatureNotSupported = "0A000"
	codeUndefinedTable      = "42P01"
	codeQueryCanceled       = "57014"
	codeAdminShutdown       = "57P01"
	// A named prepared statement that exists where it should not, or not
	// where it should: the connection's server session changed between
	// statements (a pooler in transaction mode).
	codeDuplicatePreparedStatement = "42P05"
	codeInvalidStatementName       = "26000"
)

// sqlState returns the SQLSTATE of err, or "" when it has none. It reads
// the interface pgconn.PgError implements, so no driver type is needed.
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

// transient reports whether err left no effect behind, so that the
// statement may run once more (see [github.com/dbflag/leadership/internal/sqlstore.RetryOnce]): a serialization
// failure or a deadlock (possible when the server's default isolation is
// SERIALIZABLE).
func transient(err error) bool {
	switch sqlState(err) {
	case codeSerializationFailure, codeDeadlockDetected:
		return true
	}
	return false
}

// readOnlyServer reports whether err says that the session's server takes
// no writes: a standby (the acquire statement's read of the unlogged
// incarnation table fails first there), or a primary demoted or set
// read-only.
func readOnlyServer(err error) bool {
	switch sqlState(err) {
	case codeReadOnlyTransaction:
		return true
	case codeFeatureNotSupported:
		return strings.Contains(err.Error(), "during recovery")
	}
	return false
}

// readOnlyFix says what to do when the server refuses a write because the
// session is read-only.
const readOnlyFix = "the session is read-only: connect to the primary, not a standby (target_session_attrs=read-write), and do not set default_transaction_read_only=on for the store's role, database or DSN"

// describe wraps err with what failed and, when the cause is known, how to
// fix it.
func describe(what string, err error) error {
	switch sqlState(err) {
	case codeInsufficientPrivilege:
		return fmt.Errorf("postgres: %s: permission denied: grant the role USAGE on the schema, SELECT, INSERT and UPDATE on leadership_flags, SELECT and INSERT on leadership_incarnation, SELECT and UPDATE on leadership_guard, SELECT on leadership_schema_migrations (and CREATE on the schema to run migrations): %w", what, err)
	case codeReadOnlyTransaction:
		return fmt.Errorf("postgres: %s: %s: %w", what, readOnlyFix, err)
	case codeFeatureNotSupported:
		if readOnlyServer(err) {
			return fmt.Errorf("postgres: %s: the server is a standby (in recovery): %s: %w", what, readOnlyFix, err)
		}
	case codeUndefinedTable:
		return fmt.Errorf("postgres: %s: table missing: run the migrations (Build does unless Migrate(false)), and check the pool's search_path and the role's USAGE on that schema: %w", what, err)
	case codeQueryCanceled:
		return fmt.Errorf("postgres: %s: cancelled (statement_timeout or context): %w", what, err)
	case codeAdminShutdown:
		return fmt.Errorf("postgres: %s: server shutting down: %w", what, err)
	case codeDuplicatePreparedStatement, codeInvalidStatementName:
		return fmt.Errorf("postgres: %s: prepared statements do not survive between statements: is a pooler in transaction mode (PgBouncer before 1.21 or without max_prepared_statements, RDS Proxy) in between? Add default_query_exec_mode=simple_protocol (or exec) to the DSN: %w", what, err)
	}
	return fmt.Errorf("postgres: %s: %w", what, err)
}

// errInTransaction is returned when a statement of the store ran inside a
// transaction the session had open before it.
var errInTransaction = errors.New("the session was inside a transaction, so the statement was not committed and will be rolled back: the store needs sessions outside any transaction (does a pgx AfterConnect or PrepareConn hook run BEGIN?)")
