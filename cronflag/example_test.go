package cronflag_test

import (
	"context"
	"fmt"
	"log"

	"github.com/robfig/cron/v3"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/cronflag"
	"github.com/dbflag/leadership/sqlite"
)

func ExampleWrapper() {
	db, _ := sqlite.Open(":memory:")
	defer db.Close()
	store, _ := sqlite.New(db)
	flag, err := leadership.NewFlag().Store(store).Name("cron").Build(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer flag.Close()

	c := cron.New(cron.WithChain(cronflag.Wrapper(flag)))
	_, err = c.AddJob("@hourly", cronflag.JobFunc(func(ctx context.Context) {
		// Runs only on the leader; ctx ends when leadership is lost.
	}))
	if err != nil {
		log.Fatal(err)
	}
	c.Start()
	defer c.Stop()

	// A wrapped job can also be run by hand:
	cronflag.Wrapper(flag)(cronflag.JobFunc(func(ctx context.Context) {
		fmt.Println("running on the leader")
	})).Run()
	// Output: running on the leader
}
