package mysql

import (
	"context"
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
		if _, err := tx.ExecContext(ctx, p[1]); err != nil {
			switch number(err) {
			case errTableAccessDenied, errColumnAccessDenied, errDBAccessDenied:
				missing = append(missing, "GRANT "+p[0])
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("mysql: permission denied: the user lacks privileges the store needs on its tables: %s (each TO the user, or on the whole database)",
			strings.Join(missing, ", "))
	}
	return nil
}
