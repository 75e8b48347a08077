package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4/database"
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
	// golang-migrate needs autocommit: without it, its read of the version
	// leaves a transaction open (and reads an old snapshot if the session
	// had one), and its version update then fails to start a transaction
	// (error 1568). So autocommit is turned on for this connection, which
	// commits whatever the session had left open, and turned off again
	// before the connection returns to the pool.
	var autocommit bool
	if err := conn.QueryRowContext(ctx, `SELECT @@SESSION.autocommit`).Scan(&autocommit); err != nil {
		conn.Close()
		return err
	}
	if !autocommit {
		if _, err := conn.ExecContext(ctx, `SET SESSION autocommit = 1`); err != nil {
			conn.Close()
			return err
		}
	}
	var drv database.Driver
	drv, err = mmysql.WithConnection(ctx, conn, &mmysql.Config{MigrationsTable: migrations.MigrationsTable})
	if err != nil {
		if !autocommit {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SET SESSION autocommit = 0`)
		}
		conn.Close()
		return err
	}
	if !autocommit {
		drv = autocommitOff{drv, conn}
	}
	return schema.Apply("mysql", "mysql", drv)
}

// autocommitOff is golang-migrate's driver on a connection whose session
// had autocommit off: Close turns it off again before the driver returns
// the connection to the pool.
type autocommitOff struct {
	database.Driver
	conn *sql.Conn
}

func (d autocommitOff) Close() error {
	_, err := d.conn.ExecContext(context.Background(), `SET SESSION autocommit = 0`)
	return errors.Join(err, d.Driver.Close())
}

// checkShape fails with a clear message when leadership_flags lacks a
// column the store needs or has it with another type (for example, a table
// made by hand).
func (s *Store) checkShape(ctx context.Context) error {
	got := map[string]string{}
	err := s.inTx(ctx, true, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `
SELECT column_name, data_type FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = 'leadership_flags'`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var col, typ string
			if err := rows.Scan(&col, &typ); err != nil {
				return err
			}
			got[strings.ToLower(col)] = strings.ToLower(typ)
		}
		return rows.Err()
	})
	if err != nil {
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
	err = s.inTx(ctx, true, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, "SELECT version, dirty FROM `"+migrations.MigrationsTable+"` LIMIT 1").Scan(&v, &dirty)
	})
	switch {
	case err == nil:
		return uint(v), dirty, nil
	case number(err) == errNoSuchTable, errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	}
	return 0, false, describe("read schema version", err)
}
