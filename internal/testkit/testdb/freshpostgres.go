package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
)

// FreshPostgres creates a schema of the test's own on the PostgreSQL
// server that [Postgres] finds, drops it when the test ends, and returns a
// DSN whose search_path names it, so that the test's tables, its guard
// record (schema-wide: a hold must not reach other tests) and its schema
// version are its own.
func FreshPostgres(t testing.TB) string {
	t.Helper()
	return PostgresSchema(t, Postgres(t))
}

// PostgresSchema is [FreshPostgres] on the server of dsn.
func PostgresSchema(t testing.TB, dsn string) string {
	t.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	schema := "lt_" + hex.EncodeToString(b[:])
	exec := func(sql string) error {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(context.Background(), sql)
		return err
	}
	if err := exec(`CREATE SCHEMA ` + schema); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() { _ = exec(`DROP SCHEMA ` + schema + ` CASCADE`) })
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
