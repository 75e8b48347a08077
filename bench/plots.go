package main

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The distributions of figures 1 and 2 as SVG plots, one dot per takeover,
// written next to the timeline and shown under the tables of the report.

// plotFiles names the plots, by figure.
var plotFiles = map[string]string{
	"failover": "bench-failover.svg",
	"handover": "bench-handover.svg",
}

// writePlots draws the crash failovers and graceful handovers of r into
// dir and records, for the report, where they are relative to the report.
func (r *report) writePlots(dir, out string) error {
	plots := map[string]string{
		"failover": failoverSVG(r.crash, r.started),
		"handover": handoverSVG(r.graceful, r.started),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r.plots = map[string]string{}
	for name, svg := range plots {
		path := filepath.Join(dir, plotFiles[name])
		if err := os.WriteFile(path, []byte(svg), 0o644); err != nil {
			return err
		}
		rel, err := filepath.Rel(filepath.Dir(out), path)
		if err != nil {
			rel = path
		}
		r.plots[name] = filepath.ToSlash(rel)
	}
	return nil
}

// plotRef writes the image line of a plot the run drew, if it drew one.
func (r *report) plotRef(p func(string, ...any), name, alt string) {
	if path, ok := r.plots[name]; ok {
		p("![%s](%s)", alt, path)
		p("")
	}
}

// takeovers runs figures 1 and 2 on one database: crash failovers, then
// graceful handovers, of ours and (on PostgreSQL) the peer.
func takeovers(t target, runID string, o options) (crash, graceful []result) {
	impls := []string{"ours"}
	if t.kind == "postgres" {
		impls = append(impls, "peer")
	}
	for _, impl := range impls {
		logf("crash failover: %s on %s, %d rounds, lease/interval %v", impl, t.kind, o.rounds, o.lease)
		ds, err := takeoverFigure(t, impl, runID, "crash", o.lease, o.lease, syscall.SIGKILL, o.rounds)
		crash = append(crash, result{db: t.kind, impl: impl, lease: o.lease, ds: ds, err: err})
	}
	for _, impl := range impls {
		lease := o.gracefulLease
		if impl == "peer" {
			lease = o.lease
		}
		logf("graceful handover: %s on %s, %d rounds, lease/interval %v", impl, t.kind, o.rounds, lease)
		// Signal anywhere in a poll cycle (ours) or a check cycle (peer).
		phase := min(lease/3, 2*time.Second)
		if impl == "peer" {
			phase = lease
		}
		ds, err := takeoverFigure(t, impl, runID, "graceful", lease, phase, syscall.SIGTERM, o.rounds)
		graceful = append(graceful, result{db: t.kind, impl: impl, lease: lease, ds: ds, err: err})
	}
	return crash, graceful
}

// takeoversOnly runs figures 1 and 2 on every target, writes their plots
// and prints their samples (-takeovers-only: no report).
func takeoversOnly(r *report, targets []target, runID string, o options) error {
	fmt.Printf("load average at start: %s\n", r.loadStart)
	for _, t := range targets {
		c, g := takeovers(t, runID, o)
		r.crash, r.graceful = append(r.crash, c...), append(r.graceful, g...)
	}
	r.finished, r.loadEnd = time.Now().UTC(), loadavg()
	fmt.Printf("load average at end: %s\n", r.loadEnd)
	for _, set := range []struct {
		what string
		rs   []result
	}{{"crash failover", r.crash}, {"graceful handover", r.graceful}} {
		for _, c := range set.rs {
			fmt.Printf("%s, %s on %s, lease %v, %d rounds: %s (err %v)\nµs: %v\n", set.what, c.impl, c.db, c.lease, len(c.ds), quantiles(c.ds), c.err, micros(c.ds))
		}
	}
	dir := filepath.Dir(o.svg)
	if err := r.writePlots(dir, o.out); err != nil {
		return err
	}
	logf("wrote %s and %s", filepath.Join(dir, plotFiles["failover"]), filepath.Join(dir, plotFiles["handover"]))
	return nil
}

// plotRow is one row of dots.
type plotRow struct {
	label string
	xs    []float64 // in the axis's unit
	band  [2]float64
}

func rowLabel(c result) string {
	if c.impl == "peer" {
		return c.db + ", peer (ocm-sdk-go)"
	}
	return c.db + ", ours"
}

// failoverSVG plots crash failovers as multiples of the lease, with the
// range expected from the source shaded.
func failoverSVG(rs []result, when time.Time) string {
	var rows []plotRow
	hi := 1.25
	for _, c := range rs {
		row := plotRow{label: rowLabel(c), band: [2]float64{2.0 / 3, 1.05}}
		if c.impl == "peer" {
			row.band = [2]float64{0.4, 1.6}
		}
		hi = max(hi, row.band[1]*1.02)
		for _, d := range c.ds {
			row.xs = append(row.xs, float64(d)/float64(c.lease))
		}
		if len(row.xs) > 0 {
			hi = max(hi, slices.Max(row.xs)*1.05)
		}
		rows = append(rows, row)
	}
	lease := time.Duration(0)
	if len(rs) > 0 {
		lease = rs[0].lease
	}
	var ticks []float64
	for t := 0.0; t <= hi+1e-9; t += 0.25 {
		ticks = append(ticks, t)
	}
	return dotPlot(
		fmt.Sprintf("Crash failover: SIGKILL of the holder → another process raised, × lease (%v), %s", lease, when.Format("2006-01-02")),
		"shaded: the range expected from the source",
		rows, func(v float64) float64 { return v / hi }, ticks, func(v float64) string { return fmt.Sprintf("%.3g×", v) },
		func(v float64) string { return fmt.Sprintf("%.2f×", v) })
}

// handoverSVG plots graceful handovers on a logarithmic axis of time, from
// milliseconds (ours) to seconds (the peer, whose Close releases nothing).
func handoverSVG(rs []result, when time.Time) string {
	var rows []plotRow
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range rs {
		row := plotRow{label: rowLabel(c), band: [2]float64{math.NaN(), math.NaN()}}
		if c.impl != "peer" {
			row.label += fmt.Sprintf(" (lease %v)", c.lease)
		}
		for _, d := range c.ds {
			ms := max(float64(d)/1e6, 1e-3)
			row.xs = append(row.xs, ms)
			lo, hi = min(lo, ms), max(hi, ms)
		}
		rows = append(rows, row)
	}
	if math.IsInf(lo, 0) {
		lo, hi = 1, 1000
	}
	d0, d1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if d1 <= d0 {
		d1 = d0 + 1
	}
	var ticks []float64
	for d := d0; d <= d1; d++ {
		ticks = append(ticks, math.Pow(10, d))
	}
	return dotPlot(
		fmt.Sprintf("Graceful handover: SIGTERM of the holder (Close) → another process raised, %s", when.Format("2006-01-02")),
		"logarithmic axis",
		rows, func(v float64) float64 { return (math.Log10(v) - d0) / (d1 - d0) }, ticks, func(v float64) string {
			if v >= 1000 {
				return fmt.Sprintf("%g s", v/1000)
			}
			return fmt.Sprintf("%g ms", v)
		}, func(v float64) string {
			if v >= 1000 {
				return fmt.Sprintf("%.3g s", v/1000)
			}
			return fmt.Sprintf("%.3g ms", v)
		})
}

// dotPlot draws one row of dots per distribution on a shared axis: pos maps
// a value to [0, 1] along the axis, tick and value label the axis and the
// median.
func dotPlot(title, note string, rows []plotRow, pos func(float64) float64, ticks []float64, tick, value func(float64) string) string {
	const (
		width, left, right, top, rowH = 960.0, 230.0, 30.0, 50.0, 56.0
	)
	plotW := width - left - right
	x := func(v float64) float64 { return left + plotW*pos(v) }
	height := top + rowH*float64(max(len(rows), 1)) + 60
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`, width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>`)
	p(`<text x="10" y="22" font-size="14" font-weight="bold">%s</text>`, html.EscapeString(title))
	for i, row := range rows {
		y := top + rowH*float64(i) + rowH/2
		p(`<text x="10" y="%.1f">%s</text>`, y+4, html.EscapeString(row.label))
		p(`<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#e3e3e3"/>`, left, y, width-right, y)
		if !math.IsNaN(row.band[0]) {
			p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#e6f4ea"/>`, x(row.band[0]), y-rowH/2+6, x(row.band[1])-x(row.band[0]), rowH-12)
		}
		if len(row.xs) == 0 {
			p(`<text x="%.0f" y="%.1f" fill="#999">not measured</text>`, left+6, y+4)
			continue
		}
		for j, v := range row.xs {
			dy := (float64(j%5) - 2) * 4 // spread dots that coincide
			p(`<circle cx="%.1f" cy="%.1f" r="4" fill="#2a9d3f" fill-opacity="0.55" stroke="#1e7a30"><title>%s</title></circle>`, x(v), y+dy, value(v))
		}
		med, _, _ := spread(row.xs)
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="2"/>`, x(med), y-rowH/2+8, x(med), y+rowH/2-8)
		anchor, lx := "start", x(med)+4
		if x(med) > width-right-160 {
			anchor, lx = "end", x(med)-4
		}
		p(`<text x="%.1f" y="%.1f" font-size="11" text-anchor="%s">median %s (n=%d)</text>`, lx, y-rowH/2+16, anchor, value(med), len(row.xs))
	}
	ay := top + rowH*float64(max(len(rows), 1)) + 5
	p(`<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="black"/>`, left, ay, width-right, ay)
	for _, t := range ticks {
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`, x(t), ay, x(t), ay+4)
		p(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x(t), ay+17, tick(t))
	}
	p(`<text x="%.0f" y="%.1f" fill="#555">one dot per takeover · black line: median · %s</text>`, left, ay+38, html.EscapeString(note))
	p(`</svg>`)
	return b.String()
}
