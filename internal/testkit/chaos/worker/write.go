package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/mysql"
	"github.com/dbflag/leadership/postgres"
	"github.com/dbflag/leadership/sqlite"
)

// writer is the job of a leader in the fencing scenarios: while the flag
// is raised it takes the term, works for a while (work), then inserts a
// row (token, seq, holder) into table, in a transaction fenced with that
// term (fence) or in a plain one. The table's id, assigned at insert,
// orders the rows for the checker.
type writer struct {
	o     *storeopen.Opened
	f     *leadership.Flag
	table string
	fence bool
	work  time.Duration

	stop sync.Once
	done chan struct{}
	quit chan struct{}
	seq  int64

	committed, refused, failed atomic.Int64
}

func (w *writer) run() {
	defer close(w.done)
	ctx := context.Background()
	for {
		select {
		case <-w.quit:
			return
		default:
		}
		t, ok := w.f.Term()
		if !ok {
			time.Sleep(time.Millisecond)
			continue
		}
		time.Sleep(w.work) // the job's work between its check and its write
		w.seq++
		err := w.write(ctx, t, w.seq)
		switch {
		case err == nil:
			w.committed.Add(1)
		case errors.Is(err, leadership.ErrNotLeader):
			w.refused.Add(1)
		default:
			if w.failed.Add(1) <= 3 {
				fmt.Fprintln(os.Stderr, "worker: write:", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// close stops the loop and prints what it did to stderr.
func (w *writer) close() {
	w.stop.Do(func() { close(w.quit) })
	<-w.done
	fmt.Fprintf(os.Stderr, "writer: committed %d refused %d failed %d\n", w.committed.Load(), w.refused.Load(), w.failed.Load())
}

func (w *writer) write(ctx context.Context, t leadership.Term, seq int64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch w.o.Kind {
	case storeopen.Postgres:
		q := `INSERT INTO ` + w.table + ` (token, seq, holder) VALUES ($1, $2, $3)`
		insert := func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, q, t.Version, seq, t.Holder)
			return err
		}
		if w.fence {
			return postgres.RunFenced(ctx, w.o.Pool, t, insert)
		}
		return pgx.BeginFunc(ctx, w.o.Pool, insert)
	default:
		q := `INSERT INTO ` + w.table + ` (token, seq, holder) VALUES (?, ?, ?)`
		insert := func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, q, t.Version, seq, t.Holder)
			return err
		}
		if w.fence {
			if w.o.Kind == storeopen.SQLite {
				return sqlite.RunFenced(ctx, w.o.DB, t, insert)
			}
			return mysql.RunFenced(ctx, w.o.DB, t, insert)
		}
		tx, err := w.o.DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := insert(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
}
