package leadership_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/sqlite"
)

// A service runs a job only on the leader, on the embedded SQLite default.
// Every process that opens the same database file competes for the flag.
func Example() {
	ctx := context.Background()
	defer enterTempDir()() // flags.db goes in a directory of its own
	runNightlyReport := func() { fmt.Println("leader: running the nightly report") }

	db, err := sqlite.Open("flags.db") // github.com/dbflag/leadership/sqlite
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlite.New(db)
	if err != nil {
		log.Fatal(err)
	}
	flag, err := leadership.NewFlag().Store(store).Name("nightly-report").Build(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer flag.Close() // lowers, then releases: a follower takes over at once

	if flag.Raised() { // one clock read: ask before each piece of work
		runNightlyReport()
	}
	// Output: leader: running the nightly report
}

// enterTempDir makes a new temporary directory the working directory, and
// returns what undoes it. Examples run one at a time, after the tests.
func enterTempDir() (leave func()) {
	wd, err := os.Getwd()
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.Chdir(dir); err != nil {
		log.Fatal(err)
	}
	return func() {
		_ = os.Chdir(wd)
		_ = os.RemoveAll(dir)
	}
}

// Every option, with its default in the comment.
func ExampleFlagBuilder() {
	ctx := context.Background()
	db, _ := sqlite.Open(":memory:")
	defer db.Close()
	store, _ := sqlite.New(db)

	flag, err := leadership.NewFlag().
		Store(store).                                         // mandatory
		Name("billing-sync").                                 // mandatory
		Process("host-a").                                    // default: hostname-pid-random
		Lease(15 * time.Second).                              // default: 15s
		RenewInterval(5 * time.Second).                       // default: Lease/3
		PollInterval(2 * time.Second).                        // default: Lease/3, at most 2s (Lease on postgres)
		Timeout(3 * time.Second).                             // default: Lease/5, per database call
		SafetyMargin(1500 * time.Millisecond).                // default: Lease/10
		Jitter(750 * time.Millisecond).                       // default: Lease/20
		Logger(slog.Default()).                               // default: discard
		MetricsRegisterer(prometheus.NewRegistry()).          // default: no metrics
		Migrate(true).                                        // default: apply the schema at Build
		Precheck(func(context.Context) error { return nil }). // veto leadership by returning an error
		OnRaise(func(ctx context.Context) { <-ctx.Done() }).  // runs while leading
		OnLower(func() {}).
		Build(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer flag.Close()
	fmt.Println(flag.Raised())
	// Output: true
}

// A long job started while leading is told to stop when leadership ends.
func ExampleFlag_LeaderContext() {
	db, _ := sqlite.Open(":memory:")
	defer db.Close()
	store, _ := sqlite.New(db)
	flag, err := leadership.NewFlag().Store(store).Name("compaction").Build(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer flag.Close()

	ctx, cancel, leading := flag.LeaderContext(context.Background())
	defer cancel()
	if !leading {
		return
	}
	token, _ := flag.Token()
	fmt.Println("compacting with fencing token", token)
	select {
	case <-ctx.Done(): // leadership lost: stop writing
	case <-time.After(10 * time.Millisecond): // the work
	}
	// Output: compacting with fencing token 1
}

// Block until this process leads, for a daemon that must run on one host.
func ExampleFlag_Wait() {
	db, _ := sqlite.Open(":memory:")
	defer db.Close()
	store, _ := sqlite.New(db)
	flag, err := leadership.NewFlag().Store(store).Name("singleton").Build(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer flag.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := flag.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("leading")
	// Output: leading
}

// A job that every host starts from its own schedule (cron, a systemd
// timer, a Kubernetes CronJob) runs once: the flag stays held for a while
// after the first host raised it (here 300 ms; in production a lease or
// more), even though its job ends sooner, so a host whose schedule fires
// a little later skips the job. A host starting after the hold runs it
// again.
func ExampleFlagBuilder_HoldAtLeast() {
	db, _ := sqlite.Open(":memory:")
	defer db.Close()
	store, _ := sqlite.New(db)

	cronJob := func(host string) (closed chan struct{}) {
		flag, err := leadership.NewFlag().Store(store).Name("nightly").Process(host).
			HoldAtLeast(300 * time.Millisecond).Build(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		if flag.Raised() {
			fmt.Println(host, "runs the job")
		} else {
			fmt.Println(host, "skips: held by", flag.Holder())
		}
		closed = make(chan struct{})
		go func() {
			_ = flag.Close() // lowers at once; releases when the hold ends
			close(closed)
		}()
		return closed
	}
	first := cronJob("host-a")
	<-cronJob("host-b") // fires a moment later
	<-first
	<-cronJob("host-c") // fires after the hold
	// Output:
	// host-a runs the job
	// host-b skips: held by host-a
	// host-c runs the job
}
