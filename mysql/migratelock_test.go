package mysql_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
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
// holder's connection; without a deadline Migrate gives up after 10 s, as
// golang-migrate did; once the holder lets go, Migrate succeeds.
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
	unlock := sync.OnceFunc(func() {
		if err := drv.Unlock(); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { unlock(); _ = drv.Close() })
	s := newStore(t, openDB(t, dsn))
	// With a later deadline, Migrate gives up after 10 s, as
	// golang-migrate's own wait did, naming the holder.
	long, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	err = s.Migrate(long)
	if took := time.Since(began); err == nil || took < 9*time.Second || took > 20*time.Second ||
		!strings.Contains(err.Error(), fmt.Sprintf("gave up after 10s waiting for the migration lock, which the connection %d holds", holder)) {
		t.Fatalf("Migrate with a 30 s deadline while another session holds the migration lock = %v after %v; want it to give up after 10 s, naming the holder", err, took)
	}
	testdb.CheckMigrateEndsWithItsContext(t, s.Migrate, fmt.Sprintf("connection %d ", holder), unlock)
}

// TestMigrateOnAServerThatNeverAnswersEndsSoonAfterItsContext: Migrate
// on a server that hangs returns soon after its context's end, although
// it then looks for the migration lock's holder.
func TestMigrateOnAServerThatNeverAnswersEndsSoonAfterItsContext(t *testing.T) {
	t.Parallel()
	s := newStore(t, openDB(t, "u:p@tcp("+testdb.SilentServer(t)+")/db"))
	testdb.CheckMigrateEndsSoonAfterItsContext(t, s.Migrate)
}
