package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/sqlite"
	"github.com/dbflag/leadership/storetest"
)

// TestConformance runs the store suite with every store on its own
// *sql.DB over one database file, as separate processes would share it.
func TestConformance(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flags.db")
	storetest.Run(t, func(t testing.TB) leadership.Store {
		db, err := sqlite.Open(path)
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		t.Cleanup(func() { db.Close() })
		return newStore(t, db)
	})
}

func newStore(t testing.TB, db *sql.DB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.New(db)
	if err != nil {
		t.Fatalf("sqlite.New: %v", err)
	}
	return s
}
