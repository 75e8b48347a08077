package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.md from the current report code")

// fixedReport is a report with every kind of row: measured, failed, and
// stopped early.
func fixedReport(quick bool) *report {
	ms := time.Millisecond
	boom := errors.New("boom")
	r := &report{
		opts: options{quick: quick, rounds: 20, lease: 2 * time.Second, gracefulLease: 15 * time.Second,
			load: 120 * time.Second, scaleWarm: 20 * time.Second, scaleMeasure: 30 * time.Second, benchtime: "1s"},
		started:   time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC),
		finished:  time.Date(2026, 1, 2, 4, 5, 0, 0, time.UTC),
		loadStart: "1 2 3", loadEnd: "4 5 6", machine: "M",
		targets: []target{{"postgres", "d", "PG"}, {"mysql", "d", "MY"}},
		notes:   []string{"n1"},
		raised: []benchResult{{name: "a", ns: []float64{3, 1, 2, 4}, allocs: []int64{0, 1}, base: []float64{3, 2, 1, 2}},
			{name: "c", ns: []float64{5}, allocs: []int64{0}}, {name: "b", err: boom}},
		rootBench:        "BenchmarkX 1 ns/op",
		sqliteBench:      "BenchmarkY 2 ns/op",
		postgresBench:    "BenchmarkZ 3 ns/op",
		mysqlBench:       "BenchmarkW 4 ns/op",
		mysqlFollowBench: "BenchmarkV 5 ns/op",
		closeBench:       closeBenchmarks{postgres: "BenchmarkCloseMany/pg 6 close-ms", sqlite: "BenchmarkCloseMany/sqlite 7 close-ms"},
		crash: []result{
			{db: "postgres", impl: "ours", lease: 2 * time.Second, ds: []time.Duration{1500 * ms, 1700 * ms, 1601 * ms}},
			{db: "postgres", impl: "peer", lease: 2 * time.Second, ds: []time.Duration{1500 * ms, 1700 * ms}, err: boom},
			{db: "mysql", impl: "ours", err: boom},
		},
		graceful: []result{{db: "postgres", impl: "ours", ds: []time.Duration{3 * ms, 5 * ms}}, {db: "mysql", impl: "ours", err: boom}},
		stall:    []result{{db: "postgres", impl: "ours", ds: []time.Duration{3 * ms, 5 * ms, 7 * ms}, firstTrue: 1}, {db: "postgres", impl: "peer", err: boom}},
		load: []loadRow{
			{db: "postgres", impl: "ours", settings: "S1", lease: 15 * time.Second, worst: 15750 * ms, leader: []float64{0.2}, followers: []float64{0.1, 0.06}, leaderN: "24 in 120.0 s"},
			{db: "postgres", impl: "peer", settings: "S2: equal worst-case crash failover", lease: 9844 * ms, worst: 15750 * ms, leader: []float64{0.6}, followers: []float64{0.4, 0.4}, leaderN: "72 in 120.0 s"},
			{db: "postgres", impl: "peer", settings: "S5: equal lease", lease: 15 * time.Second, worst: 24 * time.Second, leader: []float64{0.4}, followers: []float64{0.26, 0.26}, leaderN: "48 in 120.0 s"},
			{db: "mysql", impl: "ours", settings: "S3", lease: 15 * time.Second, worst: 15750 * ms, leader: []float64{0.5}, followers: []float64{0.4, 0.6}, leaderN: "60 in 120.0 s"},
			{db: "sqlite", impl: "ours", settings: "S4", err: boom},
		},
		scale: []scaleStep{
			{pairs: 1000, flagsPerProc: 500, attempts: 100, stmts: 120, raisedStart: 500, raisedEnd: 500, p50: ms, p99: 2 * ms, pmax: 3 * ms, window: 30 * time.Second, ok: true, backends: 10,
				roundTrips: 60, attemptP50: 2 * ms, attemptP99: 4 * ms, attemptPmax: 8 * ms},
			{pairs: 2000, flagsPerProc: 1000, errs: 3, window: 30 * time.Second},
		},
		scaleErr: boom,
		timeline: &timelineRun{db: "postgres", lease: 2 * time.Second, notes: []string{"t1"}},
	}
	if quick {
		r.rootBench, r.sqliteBench, r.postgresBench, r.mysqlBench, r.mysqlFollowBench, r.timeline = "", "", "", "", "", nil
		r.closeBench = closeBenchmarks{}
		r.scale, r.scaleErr = r.scale[:1], nil
	}
	return r
}

// TestMarkdown pins the text of the report for fixed figures, so that a
// change to report.go that alters BENCHMARKS.md shows without the
// 30-minute run. After a deliberate change: go test -run Markdown -update.
func TestMarkdown(t *testing.T) {
	for _, quick := range []bool{false, true} {
		path := filepath.Join("testdata", "report.md")
		if quick {
			path = filepath.Join("testdata", "report-quick.md")
		}
		// The scale section names the cores of the machine it runs on.
		got := strings.Replace(fixedReport(quick).markdown(), fmt.Sprintf("the same %d cores", runtime.NumCPU()), "the same N cores", 1)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("markdown() differs from %s (go test -run Markdown -update rewrites it after a deliberate change); got:\n%s", path, got)
		}
	}
}

// TestRatiosDivideEachRepetitionByItsOwnBaseline checks the Raised()
// ratio: repetition by repetition, skipping a missing or zero baseline.
func TestRatiosDivideEachRepetitionByItsOwnBaseline(t *testing.T) {
	br := benchResult{ns: []float64{30, 26, 40, 9}, base: []float64{30, 13, 0}}
	got := br.ratios()
	want := []float64{1, 2}
	if !slices.Equal(got, want) {
		t.Errorf("ratios() = %v, want %v", got, want)
	}
}

// TestCloseOnlyReplacesItsSectionAlone checks how -close-only writes
// section 7 into an existing report: in place of the section 7 it has,
// up to the next section, or before the timeline when it has none; the
// rest of the report is kept as it was.
func TestCloseOnlyReplacesItsSectionAlone(t *testing.T) {
	section := closeBenchmarks{sqlite: "BenchmarkCloseMany 1 close-ms"}.section("Measured then.")
	if !strings.HasPrefix(section, closeTitle+"\n") || !strings.Contains(section, "Measured then.") || !strings.Contains(section, "BenchmarkCloseMany 1 close-ms") {
		t.Fatalf("section = %q", section)
	}
	without := "# B\n\n## 6. Many\n\nsix\n\n## Timeline\n\nend\n"
	with := "# B\n\n## 6. Many\n\nsix\n\n" + section + "## Timeline\n\nend\n"
	if got := replaceSection(without, section); got != with {
		t.Errorf("into a report without section 7:\n%s\nwant\n%s", got, with)
	}
	old := strings.Replace(with, "BenchmarkCloseMany 1 close-ms", "old figures", 1)
	if got := replaceSection(old, section); got != with {
		t.Errorf("over an older section 7:\n%s\nwant\n%s", got, with)
	}
	if got := replaceSection("# B\n", section); got != "# B\n\n"+section {
		t.Errorf("into a report without a timeline: %q", got)
	}
	if (closeBenchmarks{}).section("x") != "" {
		t.Error("a section without figures should be empty")
	}
}
