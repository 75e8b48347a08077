package leadership_test

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/faultstore"
	"github.com/dbflag/leadership/memstore"
)

// TestMetricsForAlerts checks the gauges the alerting rules read: the
// settings, the fencing token of the raised term (0 when lowered) and
// Flag.Check as a 0/1 gauge computed at scrape time.
func TestMetricsForAlerts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cut := faultstore.Wrap(memstore.New())
		reg := prometheus.NewPedanticRegistry()
		withReg := func(b *leadership.FlagBuilder) { b.MetricsRegisterer(reg).RenewInterval(2 * time.Second) }
		a := build(t, cut, "a", withReg)
		b := build(t, cut, "b", withReg)
		names := []string{leadership.MetricLease, leadership.MetricRenewInterval, leadership.MetricToken, leadership.MetricHealthy}
		want := `
# HELP leadership_flag_healthy 1 when Flag.Check passes at scrape time, 0 when renewals are overdue or the loop is stalled.
# TYPE leadership_flag_healthy gauge
leadership_flag_healthy{name="job",process="a"} 1
leadership_flag_healthy{name="job",process="b"} 1
# HELP leadership_flag_lease_seconds Lease of the flag in seconds.
# TYPE leadership_flag_lease_seconds gauge
leadership_flag_lease_seconds{name="job",process="a"} 10
leadership_flag_lease_seconds{name="job",process="b"} 10
# HELP leadership_flag_renew_interval_seconds How often the holder renews the flag, in seconds.
# TYPE leadership_flag_renew_interval_seconds gauge
leadership_flag_renew_interval_seconds{name="job",process="a"} 2
leadership_flag_renew_interval_seconds{name="job",process="b"} 2
# HELP leadership_flag_token Fencing token of the term while the flag is raised, else 0.
# TYPE leadership_flag_token gauge
leadership_flag_token{name="job",process="a"} 1
leadership_flag_token{name="job",process="b"} 0
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
			t.Fatal(err)
		}

		// The database fails: a holds its term past the trust window, so it
		// lowers (token 0) and its Check reports overdue renewals; b, a
		// follower, stays healthy.
		cut.Fail(errors.New("database down"))
		time.Sleep(testLease)
		synctest.Wait()
		if err := a.Check(); !errors.Is(err, leadership.ErrRenewalOverdue) {
			t.Fatalf("Check = %v, want ErrRenewalOverdue", err)
		}
		for _, c := range []struct {
			metric, process string
			want            float64
		}{
			{leadership.MetricHealthy, "a", 0},
			{leadership.MetricHealthy, "b", 1},
			{leadership.MetricToken, "a", 0},
			{leadership.MetricState, "a", 0},
		} {
			if got := gauge(t, reg, c.metric, c.process); got != c.want {
				t.Errorf("%s{process=%q} = %v during the outage, want %v", c.metric, c.process, got, c.want)
			}
		}

		// The database answers again: one of them leads (a renews its term
		// or b takes a new one), both are healthy and the gauges show the
		// tokens Flag.Token reports.
		cut.Fail(nil)
		time.Sleep(2 * testLease)
		synctest.Wait()
		leaders := 0
		for _, f := range []*leadership.Flag{a, b} {
			tok, raised := f.Token()
			if raised {
				leaders++
			}
			if got := gauge(t, reg, leadership.MetricToken, f.Process()); got != float64(tok) {
				t.Errorf("token{%s} = %v after recovery, want %d", f.Process(), got, tok)
			}
			if got := gauge(t, reg, leadership.MetricHealthy, f.Process()); got != 1 {
				t.Errorf("healthy{%s} = %v after recovery, want 1", f.Process(), got)
			}
		}
		if leaders != 1 {
			t.Errorf("%d leaders after recovery, want 1", leaders)
		}
	})
}

// TestClosedFlagDeletesAllItsSeries closes one of two flags on a registry
// and checks that no series of any leadership metric names it any more,
// while the other's remain (b gains series when it takes over).
func TestClosedFlagDeletesAllItsSeries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := faultstore.Wrap(memstore.New())
		reg := prometheus.NewPedanticRegistry()
		withReg := func(b *leadership.FlagBuilder) { b.MetricsRegisterer(reg) }
		a := build(t, s, "a", withReg)
		build(t, s, "b", withReg)
		// One failed attempt, so that every metric of a has a series.
		s.Fail(errors.New("down"))
		time.Sleep(testLease / 2)
		s.Fail(nil)
		time.Sleep(testLease / 2)
		synctest.Wait()
		before := seriesOf(t, reg)
		for _, name := range []string{leadership.MetricState, leadership.MetricTransitions, leadership.MetricAttemptDuration,
			leadership.MetricErrors, leadership.MetricLease, leadership.MetricRenewInterval, leadership.MetricToken, leadership.MetricHealthy} {
			if before[name]["a"] == 0 {
				t.Errorf("%s has no series of a before Close", name)
			}
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		after := seriesOf(t, reg)
		for name, byProcess := range after {
			if byProcess["a"] != 0 {
				t.Errorf("%s still has %d series of the closed flag", name, byProcess["a"])
			}
			if byProcess["b"] < before[name]["b"] {
				t.Errorf("%s has %d series of the open flag, had %d", name, byProcess["b"], before[name]["b"])
			}
		}
	})
}

// seriesOf counts the series on reg by metric name and process label.
func seriesOf(t *testing.T, reg *prometheus.Registry) map[string]map[string]int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int{}
	for _, mf := range mfs {
		out[mf.GetName()] = map[string]int{}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "process" {
					out[mf.GetName()][l.GetValue()]++
				}
			}
		}
	}
	return out
}

// gauge reads the gauge name{process=process} on reg.
func gauge(t *testing.T, reg *prometheus.Registry, name, process string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "process" && l.GetValue() == process {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{process=%q}", name, process)
	return 0
}
