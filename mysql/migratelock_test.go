package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	mmysql "github.com/golang-migrate/migrate/v4/database/mysql"

	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/migrations"
)

// TestMigrateEndsWithItsContextWhileAnotherHoldsTheMigrationLock checks
// that a session holding golang-migrate's lock (another process
// migrating, a `leadership migrate` that was stopped) holds Migrate, and
// so Build, no longer than its context: golang-migrate's MySQL driver
// waits for its GET_LOCK up to 10 s without one. The error names the
// holder's connection; once the holder lets go, Migrate succeeds.
func TestMigrateEndsWithItsContextWhileAnotherHoldsTheMigrationLock(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, testdb.MySQL(t), nil)
	holderDB := openDB(t, dsn)
	conn, err := holderDB.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var holder int64
	if err := conn.QueryRowContext(context.Background(), `SELECT CONNECTION_ID()`).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	drv, err := mmysql.WithConnection(context.Background(), conn, &mmysql.Config{MigrationsTable: migrations.MigrationsTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Lock(); err != nil {
		t.Fatal(err)
	}
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			if err := drv.Unlock(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(func() { unlock(); _ = drv.Close() })

	s := newStore(t, openDB(t, dsn))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- s.Migrate(ctx) }()
	select {
	case err := <-done:
		t.Logf("Migrate returned %v after its context's end, with: %v", time.Since(began)-time.Second, err)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "migration lock") {
			t.Fatalf("Migrate while another session holds the migration lock = %v; want the context's error, naming the migration lock", err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("connection %d ", holder)) {
			t.Fatalf("Migrate's error %q does not name the connection %d that holds the lock", err, holder)
		}
	case <-time.After(3 * time.Second):
		unlock()
		err := <-done
		t.Fatalf("Migrate was still waiting for the migration lock 2 s after its context ended (then: %v)", err)
	}
	unlock()
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate after the holder let the lock go: %v", err)
	}
}
