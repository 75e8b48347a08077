package leadership_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// BenchmarkBuildFlags builds b.N flags with the default settings (Migrate
// on) but a lease of one hour on one store of each database, as a process
// with a flag per tenant does, and reports the time per Build and the heap
// and goroutines each live flag holds. The long lease keeps the renewals of
// the flags already built (10,000 flags at the default 15 s lease renew
// 2,000 times a second) from competing with Build for the store's
// connections. The figures of docs/performance.md ("Many flags in one
// process") come from
//
//	go test -run '^$' -bench BuildFlags -benchtime 10000x .
func BenchmarkBuildFlags(b *testing.B) {
	dsns := map[string]func(b *testing.B) string{
		"postgres": func(b *testing.B) string { return testdb.Postgres(b) },
		"mysql": func(b *testing.B) string {
			u, err := storeopen.MySQLURL(testdb.MySQL(b))
			if err != nil {
				b.Fatal(err)
			}
			return u
		},
		"sqlite": func(b *testing.B) string { return "sqlite:" + filepath.Join(b.TempDir(), "flags.db") },
	}
	for _, db := range []string{"postgres", "mysql", "sqlite"} {
		b.Run(db, func(b *testing.B) {
			ctx := context.Background()
			opened, err := storeopen.Open(ctx, dsns[db](b))
			if err != nil {
				b.Fatal(err)
			}
			defer opened.Close()
			prefix := fmt.Sprintf("bench-build-%d-", time.Now().UnixNano())
			flags := make([]*leadership.Flag, 0, b.N)
			defer closeAll(&flags)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			goroutines := runtime.NumGoroutine()
			b.ResetTimer()
			for i := range b.N {
				f, err := leadership.NewFlag().Store(opened.Store).Name(fmt.Sprint(prefix, i)).Lease(time.Hour).Build(ctx)
				if err != nil {
					b.Fatalf("Build of flag %d: %v", i, err)
				}
				flags = append(flags, f)
			}
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "heap-B/flag")
			b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/float64(b.N), "goroutines/flag")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/flag")
		})
	}
}

// closeAll closes the flags, a few at a time.
func closeAll(flags *[]*leadership.Flag) {
	var wg sync.WaitGroup
	work := make(chan *leadership.Flag)
	for range 8 {
		wg.Go(func() {
			for f := range work {
				_ = f.Close()
			}
		})
	}
	for _, f := range *flags {
		work <- f
	}
	close(work)
	wg.Wait()
}
