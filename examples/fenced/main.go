// Command fenced shows a fenced transaction refusing the write of a
// leader that stalled past its term, on the embedded SQLite store: host-a
// leads and starts a job, the job stalls (a GC pause, SIGSTOP), an
// operator evicts host-a, host-b takes over and writes; when host-a's job
// resumes, its write, fenced with the term it started in, is refused, so
// the table never shows a former term's write after a later one's.
//
//	go run ./examples/fenced
package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/sqlite"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(out io.Writer) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fenced")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlite.New(db)
	if err != nil {
		return err
	}
	if _, err := db.Exec(`CREATE TABLE report (id INTEGER PRIMARY KEY, token INTEGER, host TEXT)`); err != nil {
		return err
	}
	build := func(host string) (*leadership.Flag, error) {
		return leadership.NewFlag().Store(store).Name("report").Process(host).Lease(time.Second).Build(ctx)
	}
	write := func(leader leadership.Leader, host string) error {
		return sqlite.RunFenced(ctx, db, leader, func(tx *sql.Tx) error {
			t, _ := leader.Term()
			_, err := tx.ExecContext(ctx, `INSERT INTO report (token, host) VALUES (?, ?)`, t.Version, host)
			return err
		})
	}

	a, err := build("host-a")
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := build("host-b")
	if err != nil {
		return err
	}
	defer b.Close()

	job, _ := a.Term() // host-a's job starts in this term...
	fmt.Fprintf(out, "host-a leads (token %d); its job starts and stalls\n", job.Version)
	if _, err := store.Evict(ctx, "report"); err != nil { // ...and stalls while an operator evicts host-a
		return err
	}
	if err := b.Wait(ctx); err != nil {
		return err
	}
	token, _ := b.Token()
	fmt.Fprintf(out, "host-a evicted; host-b took over (token %d) and writes: %v\n", token, write(b, "host-b"))
	fmt.Fprintf(out, "host-a's job resumes; its fenced write: %v\n", write(job, "host-a"))

	rows, err := db.Query(`SELECT token, host FROM report ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var token int64
		var host string
		if err := rows.Scan(&token, &host); err != nil {
			return err
		}
		fmt.Fprintf(out, "report row: token %d by %s\n", token, host)
	}
	return rows.Err()
}
