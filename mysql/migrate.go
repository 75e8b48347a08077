package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	mmysql "github.com/golang-migrate/migrate/v4/database/mysql"

	"github.com/dbflag/leadership/internal/schema"
	"github.com/dbflag/leadership/migrations"
)

// Migrate checks the server version, applies the embedded migrations with
// golang-migrate into the table [migrations.MigrationsTable] of the
// connection's database, then checks the flag table's shape. Concurrent
// calls from many processes are serialized by golang-migrate's GET_LOCK.
// It never closes db: golang-migrate gets a connection of its own, closed
// afterwards. Once a call has succeeded, later calls on the same Store
// return nil without touching the database.
func (s *Store) Migrate(ctx context.Context) error { return s.migrated.Do(ctx, s.applyMigrations) }

func (s *Store) applyMigrations(ctx context.Context) error {
	var version string
	if err := s.db.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		return describe("connect", err)
	}
	if err := checkVersion(version); err != nil {
		return err
	}
	if err := s.migrate(ctx); err != nil {
		// golang-migrate wraps the statements' errors in a database.Error
		// that does not unwrap, so its text is read too.
		if n := number(err); n == errTableAccessDenied || n == errDBAccessDenied || n == errSpecificDenied || strings.Contains(err.Error(), "denied") {
			return fmt.Errorf("mysql: apply migrations: permission denied: the user needs CREATE, CREATE ROUTINE and ALTER ROUTINE on the database (or let an administrator apply the migrations and build flags with Migrate(false)): %w", err)
		}
		return describe("apply migrations", err)
	}
	return s.checkShape(ctx)
}

var versionRE = regexp.MustCompile(`^(\d+)\.(\d+)`)

// checkVersion refuses servers older than MySQL 8.0 and MariaDB 10.6, the
// oldest the store is tested for.
func checkVersion(v string) error {
	m := versionRE.FindStringSubmatch(v)
	if m == nil {
		return nil // unknown format: let the statements decide
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if strings.Contains(strings.ToLower(v), "mariadb") {
		if major < 10 || major == 10 && minor < 6 {
			return fmt.Errorf("mysql: server %s is too old: MariaDB 10.6 or later is needed", v)
		}
		return nil
	}
	if major < 8 {
		return fmt.Errorf("mysql: server %s is too old: MySQL 8.0 or later is needed", v)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	// A connection of our own: the driver made with WithConnection closes
	// only it, never db. Each migration file holds one statement, so the
	// DSN needs no multiStatements.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	drv, err := mmysql.WithConnection(ctx, conn, &mmysql.Config{MigrationsTable: migrations.MigrationsTable})
	if err != nil {
		conn.Close()
		return err
	}
	return schema.Apply("mysql", "mysql", drv)
}

// checkShape fails with a clear message when leadership_flags lacks a
// column the store needs or has it with another type (for example, a table
// made by hand).
func (s *Store) checkShape(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `
SELECT column_name, data_type FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = 'leadership_flags'`)
	if err != nil {
		return describe("check table shape", err)
	}
	defer rows.Close()
	got := map[string]string{}
	for rows.Next() {
		var col, typ string
		if err := rows.Scan(&col, &typ); err != nil {
			return describe("check table shape", err)
		}
		got[strings.ToLower(col)] = strings.ToLower(typ)
	}
	if err := rows.Err(); err != nil {
		return describe("check table shape", err)
	}
	return schema.Check("mysql", got, [][2]string{
		{"name", "varchar"}, {"holder", "varchar"}, {"version", "bigint"}, {"renewed_at", "bigint"}, {"expires_at", "bigint"},
	})
}

// SchemaVersion reports the version of the applied migrations and whether
// one failed half-way (dirty); 0 when none was applied.
func (s *Store) SchemaVersion(ctx context.Context) (version uint, dirty bool, err error) {
	var v int64
	err = s.db.QueryRowContext(ctx, "SELECT version, dirty FROM `"+migrations.MigrationsTable+"` LIMIT 1").Scan(&v, &dirty)
	switch {
	case err == nil:
		return uint(v), dirty, nil
	case number(err) == errNoSuchTable, errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	}
	return 0, false, describe("read schema version", err)
}
