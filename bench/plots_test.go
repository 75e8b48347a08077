package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestThePlotsDrawADotPerTakeover: each plot is well-formed SVG with one
// dot per measured takeover, and says so for a row that measured none.
func TestThePlotsDrawADotPerTakeover(t *testing.T) {
	r := fixedReport(false)
	for name, c := range map[string]struct {
		svg string
		rs  []result
	}{
		"failover": {failoverSVG(r.crash, r.started), r.crash},
		"handover": {handoverSVG(r.graceful, r.started), r.graceful},
	} {
		want, empty := 0, 0
		for _, res := range c.rs {
			want += len(res.ds)
			if len(res.ds) == 0 {
				empty++
			}
		}
		dots := 0
		d := xml.NewDecoder(strings.NewReader(c.svg))
		for {
			tok, err := d.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: not well-formed SVG: %v\n%s", name, err, c.svg)
			}
			if el, ok := tok.(xml.StartElement); ok && el.Name.Local == "circle" {
				dots++
			}
		}
		if dots != want {
			t.Errorf("%s: %d dots, want one per takeover: %d", name, dots, want)
		}
		if got := strings.Count(c.svg, "not measured"); got != empty {
			t.Errorf("%s: %d rows say not measured, want %d", name, got, empty)
		}
	}
}

// TestTheReportShowsThePlotsItWrote: the report embeds each plot under its
// figure's table, by a path relative to the report, once it is written.
func TestTheReportShowsThePlotsItWrote(t *testing.T) {
	dir := t.TempDir()
	r := fixedReport(false)
	if err := r.writePlots(filepath.Join(dir, "docs"), filepath.Join(dir, "BENCHMARKS.md")); err != nil {
		t.Fatal(err)
	}
	md := r.markdown()
	section := func(from, to string) string {
		i, j := strings.Index(md, from), strings.Index(md, to)
		if i < 0 || j < i {
			t.Fatalf("report lacks %q before %q", from, to)
		}
		return md[i:j]
	}
	for _, c := range []struct{ in, line, file string }{
		{section("## 1. Crash failover", "## 2. Graceful handover"), "![crash failovers, one dot each](docs/bench-failover.svg)", "bench-failover.svg"},
		{section("## 2. Graceful handover", "### Stall"), "![graceful handovers, one dot each](docs/bench-handover.svg)", "bench-handover.svg"},
	} {
		if !strings.Contains(c.in, c.line) {
			t.Errorf("section lacks %s:\n%s", c.line, c.in)
		}
		if _, err := os.Stat(filepath.Join(dir, "docs", c.file)); err != nil {
			t.Error(err)
		}
	}
}
