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

// Every replica runs the same cron; only the flag's holder runs jobs. The
// schedule is a cron expression (with seconds), aligned to the wall clock,
// so a replica that takes over runs the next tick.
func ExampleWrapper() {
	db, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	store, err := sqlite.New(db)
	if err != nil {
		log.Fatal(err)
	}
	flag, err := leadership.NewFlag().Store(store).Name("cron").Build(context.Background())
	if err != nil {
		log.Fatal(err)
	}

	c := cron.New(cron.WithSeconds(), cron.WithChain(cronflag.Wrapper(flag)))
	_, err = c.AddJob("0 0 3 * * *", cronflag.JobFunc(func(ctx context.Context) {
		// runs on the leader only; ctx ends when its term does
	}))
	if err != nil {
		log.Fatal(err)
	}
	c.Start()

	// A wrapped job can also be run by hand:
	cronflag.Wrapper(flag)(cronflag.JobFunc(func(ctx context.Context) {
		fmt.Println("running on the leader")
	})).Run()

	<-c.Stop().Done() // 1. no new run starts; running ones end
	_ = flag.Close()  // 2. lower and release: another replica takes over at once
	_ = db.Close()    // 3. the pool, which Close needed to release
	// Output: running on the leader
}
