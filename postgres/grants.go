package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/dbflag/leadership/migrations"
)

// grants are the privileges the store needs on its tables, one per row:
// what docs/operations.md's "Privileges" lists for a role whose administrator
// applied the migrations.
var grants = [][2]string{
	{"leadership_flags", "SELECT"}, {"leadership_flags", "INSERT"}, {"leadership_flags", "UPDATE"},
	{"leadership_incarnation", "SELECT"}, {"leadership_incarnation", "INSERT"},
	{"leadership_guard", "SELECT"}, {"leadership_guard", "UPDATE"},
	{migrations.MigrationsTable, "SELECT"},
}

// checkGrants fails, naming each of them, when the role lacks a privilege
// of grants on a table that exists: Migrate then fails at once with the
// grants to give, instead of golang-migrate's misleading complaint (it
// tries to create a version table it cannot see) or a failure at the
// first failover (the guard's UPDATE).
func (s *Store) checkGrants(ctx context.Context) error {
	tables, privileges := make([]string, len(grants)), make([]string, len(grants))
	for i, g := range grants {
		tables[i], privileges[i] = g[0], g[1]
	}
	rows, err := s.pool.Query(ctx, `SELECT current_user, g.privilege, g.tbl FROM unnest($1::text[], $2::text[]) AS g(tbl, privilege)
WHERE to_regclass(g.tbl) IS NOT NULL AND NOT has_table_privilege(to_regclass(g.tbl), g.privilege)`, tables, privileges)
	if err != nil {
		return describe("check privileges", err)
	}
	defer rows.Close()
	var role string
	var missing []string
	for rows.Next() {
		var privilege, table string
		if err := rows.Scan(&role, &privilege, &table); err != nil {
			return describe("check privileges", err)
		}
		missing = append(missing, fmt.Sprintf("GRANT %s ON %s TO %s;", privilege, table, pgx.Identifier{role}.Sanitize()))
	}
	if err := rows.Err(); err != nil {
		return describe("check privileges", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("postgres: permission denied: the role %s lacks privileges the store needs on its tables: %s", pgx.Identifier{role}.Sanitize(), strings.Join(missing, " "))
	}
	return nil
}
