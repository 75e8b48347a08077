// Package migrations holds the schema of the flag table for each supported
// database, as golang-migrate migrations in one directory per dialect
// (sqlite, postgres, mysql). The stores apply them through golang-migrate's
// iofs source into their own migrations table, [MigrationsTable], so they
// never collide with an application's own golang-migrate table. (The sqlite
// store runs the files itself, all pending ones in one transaction, in
// golang-migrate's table format: golang-migrate's SQLite lock does not
// reach other processes.)
//
// To run them yourself and build flags with Migrate(false), apply the
// directory for your database with golang-migrate into the same version
// table, for example with its command-line tool from a checkout of this
// module:
//
//	migrate -path migrations/postgres \
//	  -database 'postgres://host/db?x-migrations-table=leadership_schema_migrations' up
package migrations

import "embed"

// FS holds the migrations, under sqlite/, postgres/ and mysql/.
//
//go:embed sqlite/*.sql postgres/*.sql mysql/*.sql
var FS embed.FS

// Names shared by every dialect.
const (
	// Table is the table of flags: one row per flag name.
	Table = "leadership_flags"
	// MigrationsTable is golang-migrate's version table for this schema.
	MigrationsTable = "leadership_schema_migrations"
)
