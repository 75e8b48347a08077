package mysql_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/mysql"
)

// A flag on MySQL or MariaDB: a *sql.DB of go-sql-driver/mysql (which the
// package registers), a store on it, and a flag. It needs a server, so it
// only compiles here.
func ExampleNew() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(db.internal:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()            // after the flags that use it
	store, err := mysql.New(db) // mysql.WithoutRoutines() for servers without stored procedures
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	flag, err := leadership.NewFlag().Store(store).Name("nightly-report").Build(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer flag.Close()

	if flag.Raised() {
		log.Print("leading: run the nightly report")
	}
}
