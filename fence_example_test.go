package leadership_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/sqlite"
)

// A leader writes to the flag's own database in fenced transactions: they
// commit only while its term holds, and the next term starts only after
// them (postgres.RunFenced and mysql.RunFenced are the same with pgx and
// MySQL transactions). A term kept from earlier fails the fence once the
// flag's row names another.
func ExampleFlag_Term() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, _ := sqlite.New(db)
	flag, err := leadership.NewFlag().Store(store).Name("billing").Process("host-a").Build(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer flag.Close()
	if _, err := db.Exec(`CREATE TABLE invoices (token INTEGER, customer TEXT)`); err != nil {
		log.Fatal(err)
	}

	// The job takes the term it runs in, and fences its transactions with
	// it (fencing with the flag itself also checks Raised at each fence).
	term, ok := flag.Term()
	if !ok {
		return // not the leader
	}
	err = sqlite.RunFenced(ctx, db, term, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices VALUES (?, 'acme')`, term.Version)
		return err
	})
	fmt.Println("first invoice:", err)

	// The same term, after an operator evicted the holder.
	if _, err := store.Evict(ctx, "billing"); err != nil {
		log.Fatal(err)
	}
	err = sqlite.RunFenced(ctx, db, term, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices VALUES (?, 'acme')`, term.Version)
		return err
	})
	fmt.Println("second invoice refused:", errors.Is(err, leadership.ErrNotLeader))

	var n int
	_ = db.QueryRow(`SELECT count(*) FROM invoices`).Scan(&n)
	fmt.Println("invoices:", n)
	// Output:
	// first invoice: <nil>
	// second invoice refused: true
	// invoices: 1
}
