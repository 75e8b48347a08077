//go:build unix

package chaos

import (
	"database/sql"
	"net/url"
	"testing"
)

// TestFailoverMariaDBCrashLosingCommitsNeverGivesTwoLeadersOrOneTokenTwice
// is the crash scenario of the postgres store (scenarioLostCommits) on a
// private MariaDB running with innodb_flush_log_at_trx_commit=0: a commit
// is acknowledged while its redo log is still in the server's memory,
// written once per innodb_flush_log_at_timeout (10 s here), so a SIGKILL
// loses it. It runs the mysql store: it passes only once that store has
// the failover guard (docs/failover.md).
func TestFailoverMariaDBCrashLosingCommitsNeverGivesTwoLeadersOrOneTokenTwice(t *testing.T) {
	scenarioMariaDBLostCommits(t, false)
}

// TestFailoverMariaDBUnguardedMutantGivesTwoLeadersOrOneTokenTwice runs
// the same with the unguarded mutant of the mysql store (worker
// -unguarded): it must find a violation.
func TestFailoverMariaDBUnguardedMutantGivesTwoLeadersOrOneTokenTwice(t *testing.T) {
	scenarioMariaDBLostCommits(t, true)
}

func scenarioMariaDBLostCommits(t *testing.T, mutant bool) {
	server := newMariaNode(t, "--innodb-flush-log-at-trx-commit=0", "--innodb-flush-log-at-timeout=10")
	lostCommitRounds(t, newRouted(t, mariaDSN, server.addr(), mutant), server, server.flushLog)
}

// mariaNode is a private MariaDB server (startPrivateMariaDB) as a
// crashable server of the failover scenarios.
type mariaNode struct {
	t       *testing.T
	srv     *privateServer
	address string
}

func newMariaNode(t *testing.T, args ...string) *mariaNode {
	t.Helper()
	srv := startPrivateMariaDB(t, args...)
	u, err := url.Parse(srv.dsn)
	if err != nil {
		t.Fatal(err)
	}
	return &mariaNode{t: t, srv: srv, address: u.Host}
}

// mariaDSN is the worker's DSN of the private MariaDB reached at addr.
func mariaDSN(addr string) string { return "mysql://root@" + addr + "/leadership" }

func (m *mariaNode) crash()       { m.srv.stop() } // SIGKILL
func (m *mariaNode) start()       { m.srv.run() }
func (m *mariaNode) addr() string { return m.address }

// exec runs statements in order on one direct connection as root.
func (m *mariaNode) exec(stmts ...string) {
	m.t.Helper()
	db, err := sql.Open("mysql", "root@tcp("+m.address+")/leadership")
	if err != nil {
		m.t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			m.t.Fatalf("%s on %s: %v", q, m.address, err)
		}
	}
}

// flushLog makes everything committed so far durable: a commit with
// innodb_flush_log_at_trx_commit=1 writes and flushes the redo log up to
// its own commit.
func (m *mariaNode) flushLog() {
	m.t.Helper()
	m.exec("SET GLOBAL innodb_flush_log_at_trx_commit = 1",
		"CREATE TABLE IF NOT EXISTS chaos_flush (n INT) ENGINE=InnoDB",
		"INSERT INTO chaos_flush VALUES (1)",
		"SET GLOBAL innodb_flush_log_at_trx_commit = 0")
}

func (m *mariaNode) version(name string) int64 {
	m.t.Helper()
	db, err := sql.Open("mysql", "root@tcp("+m.address+")/leadership")
	if err != nil {
		m.t.Fatal(err)
	}
	defer db.Close()
	var v int64
	if err := db.QueryRow(`SELECT COALESCE(MAX(version), 0) FROM leadership_flags WHERE name = ?`, name).Scan(&v); err != nil {
		m.t.Fatalf("read the row of %s on %s: %v", name, m.address, err)
	}
	return v
}
