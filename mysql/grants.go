package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/dbflag/leadership/migrations"
)

// errColumnAccessDenied is MySQL's refusal of a column (a grant on some
// columns of a table only).
const errColumnAccessDenied = 1143

// grantProbes are statements that change nothing and that the server
// refuses exactly when the user lacks the privilege named with each: what
// docs/operations.md's "Privileges" lists for a user whose administrator applied
// the migrations (routine mode also needs EXECUTE on the procedures).
var grantProbes = [][2]string{
	{"SELECT ON leadership_flags", "SELECT 1 FROM leadership_flags WHERE FALSE"},
	{"INSERT ON leadership_flags", "INSERT INTO leadership_flags (name) SELECT '' FROM DUAL WHERE FALSE"},
	{"UPDATE ON leadership_flags", "UPDATE leadership_flags SET holder = '' WHERE FALSE"},
	{"SELECT ON leadership_guard", "SELECT 1 FROM leadership_guard WHERE FALSE"},
	{"UPDATE ON leadership_guard", "UPDATE leadership_guard SET hold_until = 0 WHERE FALSE"},
	{"SELECT ON leadership_incarnation", "SELECT 1 FROM leadership_incarnation WHERE FALSE"},
	{"INSERT ON leadership_incarnation", "INSERT INTO leadership_incarnation (server_id) SELECT 0 FROM DUAL WHERE FALSE"},
	{"SELECT ON " + migrations.MigrationsTable, "SELECT 1 FROM " + migrations.MigrationsTable + " WHERE FALSE"},
}

// checkGrants fails, naming each of them, when the server refuses a probe
// of grantProbes for want of a privilege: Migrate then fails at once with
// the grants to give, instead of golang-migrate's misleading complaint (it
// tries to create a version table it cannot see) or a failure at the
// first failover (the guard's UPDATE, which the procedure runs with the
// caller's privileges). A table that does not exist yet is no failure:
// the migrations create it. The probes run in a transaction rolled back.
func (s *Store) checkGrants(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return describe("check privileges", err)
	}
	defer tx.Rollback() //nolint:errcheck // nothing was written
	var missing []string
	for _, p := range grantProbes {
		// Other errors than a refused privilege (no table yet, a read-only
		// server) are for the statements that follow to report.
		if _, err := tx.ExecContext(ctx, p[1]); denied(err) {
			missing = append(missing, "GRANT "+p[0])
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("mysql: permission denied: the user lacks privileges the store needs on its tables: %s (each TO the user, or on the whole database)",
			strings.Join(missing, ", "))
	}
	return nil
}

// checkRoutineMigrations runs while a migration that replaces a procedure
// is pending (below routineSchema): migrations 0013 and 0015 drop the
// procedures that 0014 and 0016 create (MySQL has no CREATE OR REPLACE
// PROCEDURE). If the procedures exist, it fails
//   - in statement mode, whose migrations skip routines: routine mode would
//     then find the older procedures, which do not re-read the failover
//     guard, at a schema version that vouches for the newer ones. (It
//     cannot see a procedure on which the user has no privilege;
//     ensureRoutines replaces such a one at the next Migrate in routine
//     mode by a user who can see it.)
//   - in routine mode, naming the GRANT, when the user could drop a
//     procedure but not create it again (the schema was left dirty without
//     leadership_acquire, failing every process in routine mode) or could
//     not drop it (left dirty with the older one). It probes with
//     statements the server refuses exactly for want of the privilege:
//     ALTER PROCEDURE with an empty COMMENT on each procedure (they have
//     none; DROP needs the same ALTER ROUTINE), and a procedure of its own
//     created and dropped at once. Other errors (binary logging) are for
//     the migrations to report. EXECUTE is not probed: a procedure the
//     user cannot see fails ensureRoutines naming it, and an attempt
//     refused names it (see describe).
func (s *Store) checkRoutineMigrations(ctx context.Context) error {
	version, dirty, err := s.SchemaVersion(ctx)
	if err != nil || dirty || version >= routineSchema {
		return nil // nothing to drop, or for golang-migrate to report
	}
	var db, names string
	err = s.inTx(ctx, true, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT DATABASE(), COALESCE(GROUP_CONCAT(routine_name SEPARATOR ' '), '') FROM information_schema.routines
WHERE routine_schema = DATABASE() AND routine_type = 'PROCEDURE' AND routine_name IN ('leadership_acquire', 'leadership_acquire_many')`).Scan(&db, &names)
	})
	if err != nil {
		return describe("check routine privileges", err)
	}
	if s.noRoutines && names == "" {
		return nil
	}
	if s.noRoutines {
		return fmt.Errorf("mysql: the database has the procedures of routine mode (%s) at schema version %d, and the pending migrations replace them, which statement mode cannot do "+
			"(it skips them, and routine mode would then run the older procedures, which do not keep the failover guard's promises): apply the migrations once in routine mode "+
			"(leadership migrate with a mysql:// DSN without routines=false, or Build without WithoutRoutines), as a user with CREATE ROUTINE and ALTER ROUTINE", names, version)
	}
	var missing []string
	for _, name := range strings.Fields(names) {
		if _, err := s.db.ExecContext(ctx, "ALTER PROCEDURE "+name+" COMMENT ''"); denied(err) {
			missing = append(missing, "GRANT ALTER ROUTINE ON PROCEDURE `"+db+"`."+name)
		}
	}
	createErr, dropErr := s.createProbe(ctx)
	if dropErr != nil {
		return dropErr
	}
	if denied(createErr) {
		missing = append(missing, "GRANT CREATE ROUTINE ON `"+db+"`.*")
	}
	if len(missing) > 0 {
		return fmt.Errorf("mysql: permission denied: a pending migration drops the procedures and creates them again, with privileges the user lacks: %s "+
			"(each TO the user; ALTER ROUTINE may be granted on the whole database), %s", strings.Join(missing, ", "), statementModeHint)
	}
	return nil
}

// createProbe creates a procedure of its own and drops it: createErr is
// what creating a procedure of the store would meet (a privilege, binary
// logging), dropErr a failure to drop the probe it created.
func (s *Store) createProbe(ctx context.Context) (createErr, dropErr error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	probe := "leadership_probe_" + hex.EncodeToString(b[:])
	if _, err := s.db.ExecContext(ctx, "CREATE PROCEDURE "+probe+"() BEGIN END"); err != nil {
		return err, nil
	}
	if _, err := s.db.ExecContext(ctx, "DROP PROCEDURE "+probe); err != nil {
		return nil, fmt.Errorf("mysql: check routine privileges: drop the procedure %s this check created (the user needs ALTER ROUTINE on the database): %w", probe, err)
	}
	return nil, nil
}

// denied reports whether err is the server's refusal of a privilege.
func denied(err error) bool {
	switch number(err) {
	case errProcAccessDenied, errDBAccessDenied, errTableAccessDenied, errColumnAccessDenied, errSpecificDenied:
		return true
	}
	return false
}
