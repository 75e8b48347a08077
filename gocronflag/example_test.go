package gocronflag_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/gocronflag"
	"github.com/dbflag/leadership/sqlite"
)

// Every instance runs the same scheduler; only the flag's holder runs jobs.
// The schedule is aligned to the wall clock, so a replica that takes over
// runs the next tick, and shutdown goes scheduler, flag, pool.
func ExampleElector() {
	db, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	store, err := sqlite.New(db)
	if err != nil {
		log.Fatal(err)
	}
	flag, err := leadership.NewFlag().Store(store).Name("scheduler").Build(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	report := func() {
		select {
		case ran <- struct{}{}:
		default:
		}
	}

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(gocronflag.Elector(flag)))
	if err != nil {
		log.Fatal(err)
	}
	// A cron expression with seconds: every replica ticks at the same instants.
	_, err = s.NewJob(gocron.CronJob("*/2 * * * * *", true), gocron.NewTask(report))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()

	<-ran
	fmt.Println("the leader ran the job")

	_ = s.Shutdown() // 1. no new run starts; the running one ends
	_ = flag.Close() // 2. lower and release: another replica takes over at once
	_ = db.Close()   // 3. the pool, which Close needed to release
	// Output: the leader ran the job
}

// Per-job locks on the same table, for jobs where gocron's Locker fits:
// the scheduler that locks a job's run first runs it, and the others skip
// that run.
func ExampleNewLocker() {
	db, _ := sqlite.Open(":memory:")
	defer db.Close()
	store, _ := sqlite.New(db)
	ctx := context.Background()
	a, err := gocronflag.NewLocker(ctx, store, "host-a", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	b, err := gocronflag.NewLocker(ctx, store, "host-b", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}

	// What gocron does before each run of the job named "report".
	lock, err := a.Lock(ctx, "report")
	fmt.Println("host-a locks report:", err)
	_, err = b.Lock(ctx, "report")
	fmt.Println("host-b finds report locked:", errors.Is(err, gocronflag.ErrLocked))
	_ = lock.Unlock(ctx)

	// In a service: one scheduler per instance, all with a locker.
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(a))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown()
	// Output:
	// host-a locks report: <nil>
	// host-b finds report locked: true
}
