//go:build linux

package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/sqlite"
)

// formerTerm runs the script of docs/fencing as a former term would: with
// the token of the term before the current one.
const formerTerm = `LEADERSHIP_TOKEN=$((LEADERSHIP_TOKEN - 1)) exec sh "$0" "$@"`

// TestShellJobFencesWithSQLite3 runs docs/fencing.md's SQLite example of a
// fenced shell job (docs/fencing/sqlite3.sh, on the sqlite3 command-line
// shell) under leadership run: with the run's own term the job's write
// commits; with a former term's token it fails and writes nothing.
func TestShellJobFencesWithSQLite3(t *testing.T) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		testdb.Unavailable(t, "the sqlite3 command-line shell (Debian package sqlite3)", "PATH", err.Error())
	}
	script, err := filepath.Abs("../../docs/fencing/sqlite3.sh")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "flags.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE report (token INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	dsn := "sqlite:" + path
	if code, out, errs := cli(t, "run", "--dsn", dsn, "--name", "job", "--", "sh", script, path); code != 0 {
		t.Fatalf("the fenced job of the current term: exit %d, %s %s", code, out, errs)
	}
	if code, _, errs := cli(t, "run", "--dsn", dsn, "--name", "job", "--", "sh", "-c", formerTerm, script, path); code == 0 {
		t.Fatalf("the fenced job with a former term's token succeeded: %s", errs)
	}
	if got := tokens(t, db); !slices.Equal(got, []int64{1}) {
		t.Fatalf("report holds tokens %v, want [1]: the first run's write only", got)
	}
}

// TestShellJobFencesWithPsql is TestShellJobFencesWithSQLite3 for
// PostgreSQL and docs/fencing/psql.sh, in a schema of the test's own.
func TestShellJobFencesWithPsql(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		testdb.Unavailable(t, "psql (Debian package postgresql-client)", "PATH", err.Error())
	}
	script, err := filepath.Abs("../../docs/fencing/psql.sh")
	if err != nil {
		t.Fatal(err)
	}
	base := testdb.Postgres(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	schema := "cli_fence_" + randomSuffix()
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema+`; CREATE TABLE `+schema+`.report (token bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`) //nolint:errcheck // cleanup
	dsn := withQuery(base, "options=-csearch_path%3D"+schema)
	if code, out, errs := cli(t, "run", "--dsn", dsn, "--name", "job", "--", "sh", script, dsn); code != 0 {
		t.Fatalf("the fenced job of the current term: exit %d, %s %s", code, out, errs)
	}
	if code, _, errs := cli(t, "run", "--dsn", dsn, "--name", "job", "--", "sh", "-c", formerTerm, script, dsn); code == 0 {
		t.Fatalf("the fenced job with a former term's token succeeded: %s", errs)
	}
	var got []int64
	rows, err := admin.Query(ctx, `SELECT token FROM `+schema+`.report ORDER BY token`)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int64{1}) {
		t.Fatalf("report holds tokens %v, want [1]: the first run's write only", got)
	}
}

func tokens(t *testing.T, db *sql.DB) []int64 {
	t.Helper()
	rows, err := db.Query(`SELECT token FROM report ORDER BY token`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func randomSuffix() string { return fmt.Sprintf("%08x", rand.Uint32()) }

// withQuery adds the query parameter kv (already encoded) to dsn.
func withQuery(dsn, kv string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}
