package gocronflag_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/gocronflag"
	"github.com/dbflag/leadership/sqlite"
)

// Every instance runs the same scheduler; only the flag's holder runs jobs.
func ExampleElector() {
	db, _ := sqlite.Open(":memory:")
	defer db.Close()
	store, _ := sqlite.New(db)
	flag, err := leadership.NewFlag().Store(store).Name("scheduler").Build(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer flag.Close()

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(gocronflag.Elector(flag)))
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	_, _ = s.NewJob(gocron.DurationJob(10*time.Millisecond), gocron.NewTask(func() {
		select {
		case ran <- struct{}{}:
		default:
		}
	}))
	s.Start()
	<-ran
	_ = s.Shutdown()
	fmt.Println("the leader ran the job")
	// Output: the leader ran the job
}

// Per-job locks on the same table, for jobs where gocron's Locker fits.
func ExampleNewLocker() {
	db, _ := sqlite.Open(":memory:")
	defer db.Close()
	store, _ := sqlite.New(db)
	locker, err := gocronflag.NewLocker(context.Background(), store, "host-a", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown()
	fmt.Println("scheduler with job locks ready")
	// Output: scheduler with job locks ready
}
