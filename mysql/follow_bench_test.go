package mysql_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/mysql"
)

// BenchmarkHandoverFromFourStores measures a graceful handover between
// processes when the follower's store follows flags led by four other
// stores: four processes, each leading one flag under a process name of
// its own on a pool of its own, and one store following the four flags,
// at the default settings of a 6 s lease (poll interval 2 s). Each round
// closes the leader of the next flag in turn and times its Close to the
// follower raising, then puts the flag back under a new leader of the same
// store, untimed. "pool=default" is the store as shipped: a waiter on
// each leading process's bell. "pool=3" caps the follower's pool at three
// connections, which leaves room for one waiter: the releases of the
// process it waits on wake the follower at once, the others' reach it at
// its poll. ns/op is the mean handover, ms/handover the median, max-ms the
// slowest, and polled/handover the share of handovers that took over half
// a second (at the poll: a release hint takes milliseconds).
func BenchmarkHandoverFromFourStores(b *testing.B) {
	for _, v := range []struct {
		name    string
		maxOpen int
	}{{"pool=default", 0}, {"pool=3", 3}} {
		b.Run(v.name, func(b *testing.B) { benchmarkHandoverFromFourStores(b, v.maxOpen) })
	}
}

func benchmarkHandoverFromFourStores(b *testing.B, maxOpen int) {
	const lease, stores = 6 * time.Second, 4
	dsn := freshDatabase(b, testdb.MySQL(b), nil)
	db := openDB(b, dsn)
	db.SetMaxOpenConns(maxOpen)
	following := newStore(b, db)
	build := func(s *mysql.Store, name, process string) *leadership.Flag {
		f, err := leadership.NewFlag().Store(s).Name(name).Process(process).Lease(lease).Build(context.Background())
		if err != nil {
			b.Fatalf("Build: %v", err)
		}
		b.Cleanup(func() { f.Close() })
		return f
	}
	leading := make([]*mysql.Store, stores)
	leaders, followers := make([]*leadership.Flag, stores), make([]*leadership.Flag, stores)
	names := []string{"a", "b", "c", "d"}
	for i := range leading {
		leading[i] = newStore(b, openDB(b, dsn))
		leaders[i], followers[i] = build(leading[i], names[i], "p-"+names[i]), build(following, names[i], "f")
		if !leaders[i].Raised() || followers[i].Raised() {
			b.Fatalf("flag %s: the leading store's flag should lead, the other follow", names[i])
		}
	}
	time.Sleep(500 * time.Millisecond) // the waiters now wait on the bells
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		k := i % stores
		closed := time.Now()
		if err := leaders[k].Close(); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*lease)
		err := followers[k].Wait(ctx)
		cancel()
		if err != nil {
			b.Fatalf("the follower of %s did not take over: %v", names[k], err)
		}
		took = append(took, time.Since(closed))
		b.StopTimer()
		// Back as it was: the follower lets the flag go, a new leader of
		// the same store takes it, and a new follower waits on it.
		if err := followers[k].Close(); err != nil {
			b.Fatal(err)
		}
		leaders[k], followers[k] = build(leading[k], names[k], "p-"+names[k]), build(following, names[k], "f")
		if !leaders[k].Raised() || followers[k].Raised() {
			b.Fatalf("flag %s: the leading store's flag should lead again, the other follow", names[k])
		}
		time.Sleep(300 * time.Millisecond) // the new leader has taken its bell again
		b.StartTimer()
	}
	slices.Sort(took)
	polled := 0
	for _, d := range took {
		if d > 500*time.Millisecond {
			polled++
		}
	}
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms/handover")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(polled)/float64(len(took)), "polled/handover")
}
