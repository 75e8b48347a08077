//go:build unix

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// TestChaosFence runs leaders that write rows (token, seq) in a loop, on
// each database, while the holder is stopped past its lease (SIGSTOP),
// killed and evicted, and then reads the rows in commit order: with
// fenced transactions no row of a term may follow a row of a later term.
// The same loop with plain transactions shows what fencing prevents: the
// writes of a holder stopped between its check of the term and its write
// land after the next term's. Their count is logged and must not be zero,
// so the checker is seen to catch what fencing prevents: the writer works
// 5 ms between taking its term and writing (a transaction takes about a
// millisecond), so most stops land between the two; measured on the
// three databases, every stop of 5 did.
//
// Commit order: the rows are read by an id the database assigns at insert
// (a sequence, AUTO_INCREMENT, SQLite's rowid), increasing with the time
// of the insert on every database (a PostgreSQL sequence and InnoDB's
// counter hand out values in increasing order across sessions; SQLite
// has one writer at a time). Insert order is not commit order in general,
// but across terms it is for fenced transactions: a transaction of term n
// inserts after its fence, which holds the flag's row lock (or SQLite's
// write lock) until it commits; term n+1 starts only when the lock is
// free, after that commit, and its leader fences and inserts only after
// it has started. So insert(n) < commit(n) < start(n+1) < insert(n+1),
// and an id order that shows a lower token after a higher one is a
// commit order that does too. For plain transactions the id order can
// only under-count interleavings (a late insert of a stalled term is
// seen; a stall between insert and commit is not).
func TestChaosFence(t *testing.T) {
	dbs := []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"SQLite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "flags.db") }},
		{"Postgres", freshPostgres},
		{"MariaDB", func(t *testing.T) string {
			dsn, err := storeopen.MySQLURL(testdb.FreshMySQL(t).FormatDSN())
			if err != nil {
				t.Fatal(err)
			}
			return dsn
		}},
	}
	for _, db := range dbs {
		t.Run(db.name, func(t *testing.T) {
			for _, fenced := range []bool{true, false} {
				t.Run(map[bool]string{true: "Fenced", false: "Unfenced"}[fenced], func(t *testing.T) {
					scenarioFence(t, db.dsn(t), fenced)
				})
			}
		})
	}
}

// freshPostgres returns the DSN of a schema of the test's own on the
// shared PostgreSQL server, dropped when the test ends.
func freshPostgres(t *testing.T) string {
	t.Helper()
	db := postgresDB(t)
	admin, err := pgxpool.New(context.Background(), db.dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := fmt.Sprintf("chaos_%08x", rand.Uint32())
	if _, err := admin.Exec(context.Background(), `CREATE SCHEMA `+schema); err != nil {
		admin.Close()
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		admin.Close()
	})
	sep := "?"
	if strings.Contains(db.dsn, "?") {
		sep = "&"
	}
	return db.dsn + sep + "search_path=" + schema
}

// fenceStops is how many times scenarioFence stops the holder.
func fenceStops() int {
	if os.Getenv(EnvLong) == "1" {
		return 30
	}
	return 5
}

// scenarioFence runs three writing workers and stops, kills and evicts
// the holder, then checks the rows.
func scenarioFence(t *testing.T, dsn string, fenced bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := storeopen.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", storeopen.Redact(dsn), err)
	}
	t.Cleanup(o.Close)
	table := fmt.Sprintf("fence_rows_%08x", rand.Uint32())
	createRowsTable(t, o, table)
	c := newCluster(t, dsn)
	c.workerArgs = []string{"-write", table, "-fence=" + strconv.FormatBool(fenced)}
	for range 3 {
		c.start("", 0)
	}
	for range fenceStops() {
		holder := c.leader()
		time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
		at := Mono()
		c.signal(holder, syscall.SIGSTOP)
		time.Sleep(2 * lease)
		c.signal(holder, syscall.SIGCONT)
		// A holder stopped inside a fenced transaction holds the takeover
		// off until it resumes: then it may lead on.
		_, took := c.waitLeader(crashBound+lease, at)
		c.record("stop", took)
		c.waitLowered(holder, at)
	}
	holder := c.leader()
	at := c.kill(holder)
	c.start("", 0)
	_, took := c.waitLeader(crashBound, at, holder)
	c.record("kill", took)
	holder = c.leader()
	at = Mono()
	if ok, err := o.Store.Evict(ctx, c.name); err != nil || !ok {
		t.Fatalf("evict: %v, %v", ok, err)
	}
	// The evicted holder may win the next term itself: its run after at
	// counts.
	_, took = c.waitLeader(crashBound+lease, at)
	c.record("evict", took)
	time.Sleep(lease / 2)

	var stats []string
	for id, w := range c.liveWorkers() {
		c.term(id)
		if m := writerStats.FindString(w.stderr()); m != "" {
			stats = append(stats, id+" "+m)
		}
	}
	rows := readRows(t, o, table)
	r := judge(rows)
	t.Logf("fenced=%v: %d rows, %d terms wrote; %d rows of a term after a later term's (%d episodes); writers: %s",
		fenced, len(rows), r.terms, r.stale, r.episodes, strings.Join(stats, "; "))
	for _, s := range r.shared {
		t.Errorf("SAFETY VIOLATION: %s", s)
	}
	if r.terms < 3 {
		t.Errorf("only %d terms wrote rows: the faults forced too few takeovers to judge", r.terms)
	}
	switch {
	case fenced && r.stale > 0:
		for i, s := range r.examples {
			if i == 5 {
				break
			}
			t.Errorf("SAFETY VIOLATION: %s", s)
		}
		t.Errorf("%d rows of fenced transactions committed after a later term's rows", r.stale)
	case !fenced && r.stale == 0:
		t.Errorf("without fencing, %d stops of the holder never let a former term write after a later one: the scenario cannot show what fencing prevents", fenceStops())
	}
}

var writerStats = regexp.MustCompile(`writer: committed \d+ refused \d+ failed \d+`)

// waitLowered waits until worker id, resumed after a stop at at, has
// reported the end of the run it was in when stopped, so that the next
// round does not take it for the leader.
func (c *cluster) waitLowered(id string, at int64) {
	c.t.Helper()
	for deadline := time.Now().Add(slack); ; time.Sleep(time.Millisecond) {
		ivs := c.worker(id).report().Intervals
		if k := len(ivs); k == 0 || !ivs[k-1].Open() || ivs[k-1].Start >= at {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the resumed worker %s still reports the run it was stopped in %v after SIGCONT", id, slack)
		}
	}
}

// liveWorkers returns the workers that have not exited.
func (c *cluster) liveWorkers() map[string]*worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	live := map[string]*worker{}
	for id, w := range c.workers {
		if !w.exited() {
			live[id] = w
		}
	}
	return live
}

// createRowsTable creates the table the workers write, with an id the
// database assigns at insert.
func createRowsTable(t *testing.T, o *storeopen.Opened, table string) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch o.Kind {
	case storeopen.Postgres:
		_, err = o.Pool.Exec(ctx, `CREATE TABLE `+table+` (id bigserial PRIMARY KEY, token bigint NOT NULL, seq bigint NOT NULL, holder text NOT NULL)`)
	case storeopen.MySQL:
		_, err = o.DB.ExecContext(ctx, `CREATE TABLE `+table+` (id BIGINT AUTO_INCREMENT PRIMARY KEY, token BIGINT NOT NULL, seq BIGINT NOT NULL, holder VARCHAR(255) NOT NULL) ENGINE = InnoDB`)
	default:
		_, err = o.DB.ExecContext(ctx, `CREATE TABLE `+table+` (id INTEGER PRIMARY KEY, token INTEGER NOT NULL, seq INTEGER NOT NULL, holder TEXT NOT NULL)`)
	}
	if err != nil {
		t.Fatalf("create %s: %v", table, err)
	}
}

// fenceRow is one row the workers wrote.
type fenceRow struct {
	id, token, seq int64
	holder         string
}

// readRows reads the table in id order.
func readRows(t *testing.T, o *storeopen.Opened, table string) []fenceRow {
	t.Helper()
	ctx := context.Background()
	q := `SELECT id, token, seq, holder FROM ` + table + ` ORDER BY id`
	// rows is what pgx.Rows and *sql.Rows have in common.
	var rows interface {
		Next() bool
		Scan(...any) error
		Err() error
	}
	if o.Kind == storeopen.Postgres {
		r, err := o.Pool.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		rows = r
	} else {
		r, err := o.DB.QueryContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		rows = r
	}
	var out []fenceRow
	for rows.Next() {
		var r fenceRow
		if err := rows.Scan(&r.id, &r.token, &r.seq, &r.holder); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// verdict is what judge found in the rows.
type verdict struct {
	terms    int      // distinct tokens
	stale    int      // rows whose token is lower than an earlier row's
	episodes int      // maximal runs of such rows
	examples []string // the first stale rows, described
	shared   []string // tokens written by two holders
}

// judge reads the rows in id order.
func judge(rows []fenceRow) verdict {
	var v verdict
	holders := map[int64]string{}
	var top fenceRow
	in := false
	for _, r := range rows {
		if h, ok := holders[r.token]; !ok {
			holders[r.token] = r.holder
		} else if h != r.holder {
			v.shared = append(v.shared, fmt.Sprintf("token %d written by %s and %s", r.token, h, r.holder))
		}
		if r.token < top.token {
			v.stale++
			if !in {
				v.episodes++
				in = true
			}
			if len(v.examples) < 10 {
				v.examples = append(v.examples, fmt.Sprintf("row %d (token %d, seq %d, %s) after row %d (token %d, %s)",
					r.id, r.token, r.seq, r.holder, top.id, top.token, top.holder))
			}
			continue
		}
		in = false
		top = r
	}
	v.terms = len(holders)
	return v
}
