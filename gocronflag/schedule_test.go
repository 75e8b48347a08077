package gocronflag_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/gocronflag"
	"github.com/dbflag/leadership/memstore"
)

// The package doc promises at most one replica running at a time, not one
// run per period: these two tests show both halves across a graceful
// handover, in virtual time. Replica b starts its scheduler one second
// after replica a; a leads, runs twice, and shuts down (scheduler, then
// flag) 100 ms after its second run.

// TestAnAlignedScheduleRunsOncePerPeriodAcrossAHandover: with a cron
// schedule, b ticks at a's instants, so its first run comes a whole period
// after a's last.
func TestAnAlignedScheduleRunsOncePerPeriodAcrossAHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gap := handoverGap(t, func() gocron.JobDefinition { return gocron.CronJob("*/2 * * * * *", true) })
		if gap < 2*time.Second {
			t.Fatalf("b ran %v after a's last run, within a's 2 s period", gap)
		}
		if gap > 2*time.Second {
			t.Fatalf("b ran %v after a's last run, want the next tick (2 s)", gap)
		}
	})
}

// TestAScheduleCountedFromEachStartCanRunTwiceInAPeriod: with
// gocron.DurationJob each replica counts from its own start, so b's first
// run comes one second after a's last, within the 2 s period.
func TestAScheduleCountedFromEachStartCanRunTwiceInAPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if gap := handoverGap(t, func() gocron.JobDefinition { return gocron.DurationJob(2 * time.Second) }); gap != time.Second {
			t.Fatalf("b ran %v after a's last run, want 1 s (its own phase)", gap)
		}
	})
}

// handoverGap returns the time from a's last run to b's first. Each
// scheduler gets a JobDefinition of its own: gocron's cron definition is
// not safe to share between schedulers (the race detector sees it).
func handoverGap(t *testing.T, job func() gocron.JobDefinition) time.Duration {
	t.Helper()
	db := memstore.New()
	runs := make(chan string, 16)
	replica := func(name string) (*leadership.Flag, gocron.Scheduler) {
		f, err := leadership.NewFlag().Store(db).Name("report").Process(name).Build(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		s, err := gocron.NewScheduler(gocron.WithDistributedElector(gocronflag.Elector(f)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown() })
		if _, err := s.NewJob(job(), gocron.NewTask(func() { runs <- name })); err != nil {
			t.Fatal(err)
		}
		return f, s
	}
	fa, sa := replica("a")
	sa.Start()
	time.Sleep(time.Second)
	_, sb := replica("b")
	sb.Start()
	var last time.Time
	for n := 0; n < 2; {
		if who := <-runs; who != "a" {
			t.Fatalf("%s ran while a led", who)
		}
		n, last = n+1, time.Now()
	}
	time.Sleep(100 * time.Millisecond)
	if err := sa.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	if who := <-runs; who != "b" {
		t.Fatalf("%s ran after a shut down", who)
	}
	return time.Since(last)
}
