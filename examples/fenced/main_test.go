package main

import (
	"strings"
	"testing"
)

// TestFencedRefusesTheStalledLeader runs the example and checks its story:
// the new leader's write commits, the stalled former leader's is refused,
// and the table holds the new term's row only.
func TestFencedRefusesTheStalledLeader(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"host-b took over (token 2) and writes: <nil>",
		`its fenced write: leadership: not leader: fence: flag "report" is held by "host-b" at version 2, not by "host-a" at version 1`,
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("output lacks %q:\n%s", want, text)
		}
	}
	if rows := strings.Count(text, "report row:"); rows != 1 || !strings.Contains(text, "report row: token 2 by host-b") {
		t.Fatalf("want one row, token 2 by host-b:\n%s", text)
	}
}
