package mysql

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// MySQL error numbers the store treats specially.
const (
	errDBAccessDenied    = 1044
	errSpecificDenied    = 1227 // a statement needing a privilege such as SUPER
	errAccessDenied      = 1045
	errBadDB             = 1049
	errTableAccessDenied = 1142
	errNoSuchTable       = 1146
	errDupEntry          = 1062
	errLockWaitTimeout   = 1205
	errLockDeadlock      = 1213
	errProcAccessDenied  = 1370
	errSPDoesNotExist    = 1305
	errSPAlreadyExists   = 1304

	errBinlogUnsafeRoutine          = 1418 // binary logging: a routine not declared deterministic
	errBinlogCreateRoutineNeedSuper = 1419 // binary logging: creating a routine needs SUPER
	errQueryInterrupted             = 1317
	errMaxExecTimeExceed            = 3024 // MySQL max_execution_time
	errStatementTimeout             = 1969 // MariaDB max_statement_time
	errServerShutdown               = 1053
	errConnectionKilled             = 1927 // MariaDB: connection was killed

	// A server that refuses writes: a replica or a demoted primary.
	errOptionPreventsStatement = 1290 // --read-only, super_read_only (and other options: see readOnly)
	errReadOnlyTransaction     = 1792 // a read-only transaction (also MySQL's transaction_read_only)
	errReadOnlyMode            = 1836 // MySQL: running in read-only mode
)

// readOnlyHint is the fix for a server that refuses writes.
const readOnlyHint = "the server refuses writes (read-only: a replica, or a primary demoted by a failover): connect to the primary; " +
	"with rejectReadOnly=true in the go-sql-driver DSN the driver drops such a connection, so the pool reconnects " +
	"(through the failover's address) and the flag recovers at its next attempt"

// readOnly reports whether err is a refusal to write by a read-only server.
// 1290 also reports other options (--skip-grant-tables,
// --secure-file-priv): only those naming read-only count.
func readOnly(err error) bool {
	var e *mysql.MySQLError
	if !errors.As(err, &e) {
		return false
	}
	switch e.Number {
	case errReadOnlyTransaction, errReadOnlyMode:
		return true
	case errOptionPreventsStatement:
		return strings.Contains(strings.ReplaceAll(strings.ToLower(e.Message), "_", "-"), "read-only")
	}
	return false
}

// number returns the MySQL error number of err, or 0 when it has none.
func number(err error) uint16 {
	var e *mysql.MySQLError
	if errors.As(err, &e) {
		return e.Number
	}
	return 0
}

// transient reports whether err left no effect behind, so that the
// statement may run once more (see [github.com/dbflag/leadership/internal/sqlstore.RetryOnce]): a deadlock
// (InnoDB rolls the statement back), a lock wait timeout or a duplicate key
// from two inserts of a new flag racing. The flag treats any other error
// as "not acquired", never as a raise.
func transient(err error) bool { return retryTx(err) || number(err) == errDupEntry }

// describe wraps err with what failed and, when the cause is known, how to
// fix it. It never shows the DSN.
func describe(what string, err error) error {
	switch n := number(err); {
	case readOnly(err):
		return fmt.Errorf("mysql: %s: %s: %w", what, readOnlyHint, err)
	case n == errProcAccessDenied:
		return fmt.Errorf("mysql: %s: permission denied: grant the user EXECUTE on leadership_acquire (or on the database), %s, where SELECT, INSERT, UPDATE on leadership_flags suffice: %w", what, statementModeHint, err)
	case n == errTableAccessDenied || n == errDBAccessDenied:
		return fmt.Errorf("mysql: %s: permission denied: grant the user SELECT, INSERT, UPDATE on leadership_flags and, unless in statement mode, EXECUTE on leadership_acquire (and CREATE, CREATE ROUTINE, ALTER ROUTINE to run migrations; CREATE alone in statement mode): %w", what, err)
	case n == errAccessDenied:
		return fmt.Errorf("mysql: %s: login refused: check the user and password of the DSN: %w", what, err)
	case n == errBadDB:
		return fmt.Errorf("mysql: %s: the DSN's database does not exist: create it or fix the DSN: %w", what, err)
	case n == errNoSuchTable || n == errSPDoesNotExist:
		return fmt.Errorf("mysql: %s: schema missing: run the migrations (Build does unless Migrate(false)) and check the DSN's database: %w", what, err)
	case n == errQueryInterrupted || n == errMaxExecTimeExceed || n == errStatementTimeout:
		return fmt.Errorf("mysql: %s: statement interrupted (timeout or context): %w", what, err)
	case n == errServerShutdown || n == errConnectionKilled:
		return fmt.Errorf("mysql: %s: server shutting down or connection killed: %w", what, err)
	case errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn):
		return fmt.Errorf("mysql: %s: connection lost: %w", what, err)
	}
	return fmt.Errorf("mysql: %s: %w", what, err)
}

// errUncommittingProcedure is returned by Acquire when the database has the
// procedure of schema version 2, which did not commit its upsert in a
// session without autocommit.
var errUncommittingProcedure = errors.New("the procedure leadership_acquire is older than schema version 4 and does not commit in sessions without autocommit: apply the migrations (Build does unless Migrate(false); or leadership migrate)")

// errNoGuardRecord is returned by Acquire when leadership_guard has no
// record (migration 0006 inserts it).
var errNoGuardRecord = errors.New("the table leadership_guard has no record: apply the migrations (Build does unless Migrate(false); or leadership migrate)")

// errUnguardedProcedure is returned by Acquire when the database has the
// procedure of schema version 4, which has no failover guard.
var errUnguardedProcedure = errors.New("the procedure leadership_acquire is older than schema version 9 and has no failover guard: apply the migrations (Build does unless Migrate(false); or leadership migrate)")
