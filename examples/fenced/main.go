// Command fenced shows a fenced transaction refusing the write of a
// leader that stalled past its term, on the embedded SQLite store: host-a
// leads and starts a job, the job stalls (a GC pause, a slow call) while
// host-a's flag hands over (its process shutting down), host-b takes over
// and writes; when host-a's job resumes, its write, fenced with the term
// it started in, is refused, so the table never shows a former term's
// write after a later one's.
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
		return leadership.NewFlag().Store(store).Name("report").Process(host).Lease(5 * time.Second).Build(ctx)
	}
	// write inserts a row in a transaction fenced with the term: it
	// commits only while the flag's row names that term.
	write := func(term leadership.Term) error {
		return sqlite.RunFenced(ctx, db, term, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO report (token, host) VALUES (?, ?)`, term.Version, term.Holder)
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
	if err := a.Close(); err != nil { // ...and stalls while host-a hands over (a shutdown, say)
		return err
	}
	if err := b.Wait(ctx); err != nil {
		return err
	}
	next, _ := b.Term()
	fmt.Fprintf(out, "host-a handed over; host-b took over (token %d) and writes: %v\n", next.Version, write(next))
	fmt.Fprintf(out, "host-a's job resumes; its fenced write: %v\n", write(job))

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
