//go:build unix

package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// pgNode is one private PostgreSQL server of a failover scenario: a
// primary made by initdb or a streaming standby made by pg_basebackup, in
// a temporary directory of its own, on a free port.
type pgNode struct {
	t        *testing.T
	bin      string
	cred     *syscall.Credential
	dir      string
	port     int
	settings []string // server settings, name=value
}

// newPrimary initialises and starts a server with the given settings.
func newPrimary(t *testing.T, settings ...string) *pgNode {
	t.Helper()
	n := newNode(t, settings)
	runAs(t, n.cred, filepath.Join(n.bin, "initdb"), "-D", n.data(), "-U", "postgres", "-A", "trust", "--no-sync")
	n.start()
	return n
}

// newStandby makes an asynchronous streaming standby of the server that
// listens at from (host:port, typically a proxy the test can cut) with
// pg_basebackup -R, which also writes the primary_conninfo naming from,
// and starts it.
func newStandby(t *testing.T, from string, settings ...string) *pgNode {
	t.Helper()
	n := newNode(t, settings)
	host, port, _ := strings.Cut(from, ":")
	runAs(t, n.cred, filepath.Join(n.bin, "pg_basebackup"), "-D", n.data(), "-h", host, "-p", port, "-U", "postgres",
		"-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
	n.start()
	return n
}

func newNode(t *testing.T, settings []string) *pgNode {
	t.Helper()
	bin := pgBin(t, "private PostgreSQL servers for the failover scenarios")
	dir, cred := testdb.ServerDir(t, "postgres")
	n := &pgNode{t: t, bin: bin, cred: cred, dir: dir, port: testdb.FreePort(t), settings: settings}
	t.Cleanup(func() {
		_ = testdb.Command(cred, filepath.Join(bin, "pg_ctl"), "-D", n.data(), "-m", "immediate", "stop").Run()
	})
	return n
}

func (n *pgNode) data() string { return filepath.Join(n.dir, "data") }
func (n *pgNode) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// dsn is the DSN of the server reached at addr (the server itself or a
// proxy in front of it).
func pgDSN(addr string) string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=5", addr)
}

func (n *pgNode) ctl(args ...string) {
	n.t.Helper()
	runAs(n.t, n.cred, filepath.Join(n.bin, "pg_ctl"), append([]string{"-D", n.data()}, args...)...)
}

// start starts the server and returns once it accepts connections (after
// crash recovery, if it crashed).
func (n *pgNode) start() {
	n.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", n.port, n.dir)
	for _, s := range n.settings {
		opts += " -c " + s
	}
	n.ctl("-o", opts, "-l", filepath.Join(n.dir, "log"), "-w", "-t", "60", "start")
}

// crash stops the server with -m immediate: every server process quits
// at once, without a checkpoint and without writing the WAL it still
// holds in memory.
func (n *pgNode) crash() { n.t.Helper(); n.ctl("-m", "immediate", "-w", "stop") }

// remove crashes the server if it runs and deletes its directory: a
// failed primary that is never used again.
func (n *pgNode) remove() {
	_ = testdb.Command(n.cred, filepath.Join(n.bin, "pg_ctl"), "-D", n.data(), "-m", "immediate", "stop").Run()
	_ = os.RemoveAll(n.dir)
}

// promote turns a standby into a primary and returns once it takes writes.
func (n *pgNode) promote() { n.t.Helper(); n.ctl("-w", "-t", "60", "promote") }

// queryRow runs one statement on the server directly (not through any
// proxy) and scans its row.
func (n *pgNode) queryRow(sql string, args []any, dest ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgDSN(n.addr()))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, sql, args...).Scan(dest...)
}

// version reads the version of the flag's row (0 when there is none).
func (n *pgNode) version(name string) int64 {
	n.t.Helper()
	var v int64
	err := n.queryRow(`SELECT coalesce(max(version), 0) FROM leadership_flags WHERE name = $1`, []any{name}, &v)
	if err != nil {
		n.t.Fatalf("read the row of %s on %s: %v", name, n.addr(), err)
	}
	return v
}

// flushWAL makes everything the server has committed so far durable: a
// checkpoint writes and flushes the WAL up to its own record.
func (n *pgNode) flushWAL() {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgDSN(n.addr()))
	if err == nil {
		_, err = conn.Exec(ctx, "CHECKPOINT")
		conn.Close(context.WithoutCancel(ctx))
	}
	if err != nil {
		n.t.Fatalf("checkpoint %s: %v", n.addr(), err)
	}
}

// waitReplayed waits until the standby has replayed all the WAL the
// primary has written so far.
func waitReplayed(t *testing.T, primary, standby *pgNode) {
	t.Helper()
	var lsn string
	if err := primary.queryRow(`SELECT pg_current_wal_lsn()::text`, nil, &lsn); err != nil {
		t.Fatalf("read the primary's WAL position: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var done bool
		err := standby.queryRow(`SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)`, []any{lsn}, &done)
		if err == nil && done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby did not replay the primary's WAL up to %s in 30 s (last error: %v)", lsn, err)
		}
	}
}
