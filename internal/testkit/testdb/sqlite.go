package testdb

import (
	"testing"

	"github.com/dbflag/leadership/sqlite"
)

// SQLite opens a store on the SQLite file at path with a pool of its own,
// as another process would, and closes the pool when the test ends.
func SQLite(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := sqlite.New(db)
	if err != nil {
		t.Fatalf("sqlite.New: %v", err)
	}
	return s
}
