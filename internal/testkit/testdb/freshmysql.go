package testdb

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
)

// FreshMySQL creates a database of the test's own on the MySQL server that
// [MySQL] finds (the test user may create leadership_*; see
// scripts/test-databases.sh), drops it when the test ends, and returns the
// driver configuration pointing at it, so that no other test's schema
// version or rows are seen.
func FreshMySQL(t testing.TB) *gomysql.Config {
	t.Helper()
	cfg, err := gomysql.ParseDSN(MySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	var b [5]byte
	_, _ = rand.Read(b[:])
	name := cfg.DBName + "_t" + hex.EncodeToString(b[:])
	if _, err := admin.Exec("CREATE DATABASE `" + name + "`"); err != nil {
		t.Fatalf("create database %s (scripts/test-databases.sh grants it on %s_%%): %v", name, cfg.DBName, err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE `" + name + "`") })
	cfg.DBName = name
	return cfg
}
