package cronflag_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/cronflag"
	"github.com/dbflag/leadership/memstore"
)

// The package doc promises at most one replica running at a time, not one
// run per period: these two tests show both halves across a graceful
// handover, in virtual time. Replica b starts its cron one second after
// replica a; a leads, runs twice, and shuts down (cron, then flag) 100 ms
// after its second run.

// TestAnAlignedScheduleRunsOncePerPeriodAcrossAHandover: with a cron
// expression (WithSeconds), b ticks at a's instants, so its first run
// comes a whole period after a's last.
func TestAnAlignedScheduleRunsOncePerPeriodAcrossAHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if gap := handoverGap(t, "*/2 * * * * *"); gap != 2*time.Second {
			t.Fatalf("b ran %v after a's last run, want the next tick (2 s)", gap)
		}
	})
}

// TestAScheduleCountedFromEachStartCanRunTwiceInAPeriod: "@every" counts
// from each replica's start, so b's first run comes one second after a's
// last, within the 2 s period.
func TestAScheduleCountedFromEachStartCanRunTwiceInAPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if gap := handoverGap(t, "@every 2s"); gap != time.Second {
			t.Fatalf("b ran %v after a's last run, want 1 s (its own phase)", gap)
		}
	})
}

// handoverGap returns the time from a's last run to b's first.
func handoverGap(t *testing.T, spec string) time.Duration {
	t.Helper()
	db := memstore.New()
	runs := make(chan string, 16)
	replica := func(name string) (*leadership.Flag, *cron.Cron) {
		f, err := leadership.NewFlag().Store(db).Name("report").Process(name).Build(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		c := cron.New(cron.WithSeconds(), cron.WithChain(cronflag.Wrapper(f)))
		if _, err := c.AddJob(spec, cronflag.JobFunc(func(context.Context) { runs <- name })); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-c.Stop().Done() })
		return f, c
	}
	fa, ca := replica("a")
	ca.Start()
	time.Sleep(time.Second)
	_, cb := replica("b")
	cb.Start()
	var last time.Time
	for n := 0; n < 2; {
		if who := <-runs; who != "a" {
			t.Fatalf("%s ran while a led", who)
		}
		n, last = n+1, time.Now()
	}
	time.Sleep(100 * time.Millisecond)
	<-ca.Stop().Done()
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	if who := <-runs; who != "b" {
		t.Fatalf("%s ran after a shut down", who)
	}
	return time.Since(last)
}
