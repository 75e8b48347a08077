package mysql_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// TestPromotedReplicaHasItsOwnIncarnation runs asynchronous replication
// between two private MariaDB servers (binary logging, server_id 1 and 2)
// and promotes the replica: the MEMORY row of the source's incarnation
// and the guard record reach the replica, yet its first acquire statement
// sees an incarnation of its own, so the live holder renews at once and a
// takeover of an expired row waits for the hold.
func TestPromotedReplicaHasItsOwnIncarnation(t *testing.T) {
	t.Parallel()
	source := testdb.StartMariaDB(t, "--log-bin=binlog", "--server-id=1", "--binlog-format=MIXED")
	replica := testdb.StartMariaDB(t, "--log-bin=binlog", "--server-id=2", "--binlog-format=MIXED", "--read-only=1")
	for _, q := range []string{
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos", source.Port()),
		"START SLAVE",
	} {
		if _, err := replica.Root.Exec(q); err != nil {
			t.Fatalf("replica: %s: %v", q, err)
		}
	}
	dsn := source.NewDatabase(t, "repl")
	db := openDB(t, dsn)
	s := newStore(t, db)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const lease = 2 * time.Second
	held := acquire(t, s, "held", "a", 0, lease)
	free := acquire(t, s, "free", "a", 0, 20*time.Millisecond)
	inc := readGuard(t, db).incarnation

	// The replica catches up: same guard record, and the source's row in
	// its MEMORY table.
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = fmt.Sprintf("127.0.0.1:%d", replica.Port())
	rdb := openDB(t, cfg.FormatDSN())
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var got string
		err := rdb.QueryRow(`SELECT incarnation FROM leadership_guard`).Scan(&got)
		if err == nil && got == inc {
			break
		}
		if time.Now().After(deadline) {
			var status string
			_ = replica.Root.QueryRow(`SELECT CONCAT(variable_value) FROM information_schema.global_status WHERE variable_name = 'SLAVE_RUNNING'`).Scan(&status)
			t.Fatalf("the replica did not receive the guard record %q in 30 s (got %q, %v; slave running %s)", inc, got, err, status)
		}
	}
	if rows := incarnationRows(t, rdb); rows[1] != inc || len(rows) != 1 {
		t.Fatalf("replica's incarnation table = %v, want the source's row {1: %q} replicated", rows, inc)
	}

	// Failover: the source stops, the replica is promoted.
	source.Crash(t) // no more writes from it (a restart leaves it out of the way)
	for _, q := range []string{"STOP SLAVE", "SET GLOBAL read_only = 0"} {
		if _, err := replica.Root.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	promoted := newStore(t, rdb)
	time.Sleep(time.Until(free.ExpiresAt) + 50*time.Millisecond)
	renewed := acquire(t, promoted, "held", "a", held.Version, lease)
	if !renewed.Acquired || renewed.Version != held.Version {
		t.Fatalf("live holder's renewal on the promoted replica = %+v, want version %d", renewed, held.Version)
	}
	g := readGuard(t, rdb)
	if g.incarnation == inc || !strings.HasPrefix(g.incarnation, "2/") || g.holdUntil < renewed.Now.Add(lease/2).UnixMicro() {
		t.Fatalf("guard record on the promoted replica = %+v, want an incarnation of server 2 (the source's was %q) and a hold", g, inc)
	}
	if res := acquire(t, promoted, "free", "b", 0, lease); res.Acquired {
		t.Fatalf("takeover of an expired row on the promoted replica = %+v, want it held", res)
	}
}
