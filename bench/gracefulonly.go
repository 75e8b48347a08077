package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// gracefulOnly runs o.rounds graceful handovers of our flag on t (three
// processes, SIGTERM to the holder anywhere in its renewal cycle, as in
// the report's figure) and prints the time from the signal to
// another process raising, and the holder's Flag.Close time (from the
// worker seeing the signal to Close returning), each as median, p90 and
// max.
func gracefulOnly(t target, runID string, o options) error {
	name := fmt.Sprintf("lbench-%s-graceful-only-%s", runID, t.kind)
	g := newGroup("worker", workerArgs(t, "ours", name, o.gracefulLease, 0))
	defer g.stopAll()
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	phase := min(o.gracefulLease/3, 2*time.Second)
	ds, err := g.rounds(o.rounds, 3, syscall.SIGTERM, phase, 4*o.gracefulLease+10*time.Second, rnd.Float64)
	var closes []time.Duration
	for _, ev := range g.closes {
		if len(ev.fields) != 3 {
			continue
		}
		t0, err0 := strconv.ParseInt(ev.fields[0], 10, 64)
		t1, err1 := strconv.ParseInt(ev.fields[1], 10, 64)
		if err0 == nil && err1 == nil {
			closes = append(closes, time.Duration(t1-t0))
		}
	}
	fmt.Printf("graceful handover, lease %v, %d rounds: SIGTERM → another process raised: %s\n", o.gracefulLease, len(ds), quantiles(ds))
	fmt.Printf("Flag.Close of the holder (signal seen → Close returned), %d closes: %s\n", len(closes), quantiles(closes))
	fmt.Printf("handovers µs: %v\n", micros(ds))
	fmt.Printf("closes µs: %v\n", micros(closes))
	return err
}

// quantiles formats the median, the 90th percentile (nearest rank) and the
// maximum of v.
func quantiles(v []time.Duration) string {
	if len(v) == 0 {
		return "no samples"
	}
	s := slices.Sorted(slices.Values(v))
	med, _, _ := spread(s)
	p90 := s[(len(s)*9+9)/10-1]
	return fmt.Sprintf("median %.2f ms, p90 %.2f ms, max %.2f ms", float64(med)/1e6, float64(p90)/1e6, float64(s[len(s)-1])/1e6)
}

func micros(v []time.Duration) []int64 {
	out := make([]int64, len(v))
	for i, d := range v {
		out[i] = d.Microseconds()
	}
	return out
}
