package cronflag_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/robfig/cron/v3"
	"go.uber.org/goleak"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/cronflag"
	"github.com/dbflag/leadership/internal/testkit/faultstore"
	"github.com/dbflag/leadership/memstore"
)

// The tests run in virtual time (testing/synctest) on the in-memory store:
// the flags' schedule and the jobs' tickers advance without real sleeps.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const lease = time.Second

func buildFlag(t *testing.T, s leadership.Store) *leadership.Flag {
	t.Helper()
	f, err := leadership.NewFlag().Store(s).Name("cron").Lease(lease).PollInterval(100 * time.Millisecond).Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// Three "schedulers" fire the same wrapped job every 20 ms; a long job on
// the leader watches its context. When the leader is cut off, its job is
// told to stop before any other scheduler's job starts.
func TestWrapperRunsOnlyOnLeaderAndStopsJobWhenLeadershipMoves(t *testing.T) {
	synctest.Test(t, testLeadershipMoves)
}

func testLeadershipMoves(t *testing.T) {
	s := memstore.New()
	cut := faultstore.Wrap(s)
	flags := []*leadership.Flag{buildFlag(t, cut), buildFlag(t, s), buildFlag(t, s)}

	var running atomic.Int32 // jobs running right now, across schedulers
	var overlap atomic.Bool
	var mu sync.Mutex
	starts := map[int]int{}
	var oldJobStopped, newJobStarted time.Time
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i, f := range flags {
		job := cronflag.Wrapper(f)(cronflag.JobFunc(func(ctx context.Context) {
			if running.Add(1) > 1 {
				overlap.Store(true)
			}
			defer running.Add(-1)
			mu.Lock()
			starts[i]++
			if i != 0 && newJobStarted.IsZero() {
				newJobStarted = time.Now()
			}
			mu.Unlock()
			<-ctx.Done() // a long job: runs until leadership ends
			if i == 0 {
				mu.Lock()
				oldJobStopped = time.Now()
				mu.Unlock()
			}
		}))
		wg.Go(func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					job.Run()
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	cut.Fail(errors.New("leader cut off"))
	time.Sleep(lease + 2*time.Second)
	for _, f := range flags {
		_ = f.Close() // ends the running job's context
	}
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if overlap.Load() {
		t.Fatal("two jobs ran at once")
	}
	if starts[0] != 1 {
		t.Fatalf("the first leader started its long job %d times, want 1", starts[0])
	}
	if newJobStarted.IsZero() || oldJobStopped.IsZero() || !oldJobStopped.Before(newJobStarted) {
		t.Fatalf("old job stopped at %v, new job started at %v; want the stop first", oldJobStopped, newJobStarted)
	}
}

func TestWrapperSkipsPlainJobsOnFollowers(t *testing.T) {
	synctest.Test(t, testSkipsPlainJobs)
}

func testSkipsPlainJobs(t *testing.T) {
	s := memstore.New()
	leader := buildFlag(t, s)
	follower := buildFlag(t, s)
	var runs [2]atomic.Int32
	c := cron.New(cron.WithSeconds())
	for i, f := range []*leadership.Flag{leader, follower} {
		if _, err := c.AddJob("* * * * * *", cron.NewChain(cronflag.Wrapper(f)).Then(cron.FuncJob(func() { runs[i].Add(1) }))); err != nil {
			t.Fatal(err)
		}
	}
	c.Start()
	time.Sleep(2100 * time.Millisecond)
	<-c.Stop().Done()
	if runs[0].Load() == 0 || runs[1].Load() != 0 {
		t.Fatalf("leader ran %d times, follower %d; want >0 and 0", runs[0].Load(), runs[1].Load())
	}
}
