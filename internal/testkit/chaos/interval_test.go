package chaos

import (
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, process, text string) Report {
	t.Helper()
	rep, err := ParseReport(process, strings.NewReader(text))
	if err != nil {
		t.Fatalf("ParseReport(%s): %v", process, err)
	}
	return rep
}

func TestOverlapsDetectsTwoLeaders(t *testing.T) {
	a := mustParse(t, "a", "ready\nraise 100 110\nlower 100 200 201\n")
	b := mustParse(t, "b", "ready\nraise 201 202\nlower 201 300 301\n") // touches a's end: shared instant
	got := Overlaps(Spans(map[string]Report{"a": a, "b": b}, nil))
	if len(got) != 1 || got[0].A.Process != "a" || got[0].B.Process != "b" {
		t.Fatalf("Overlaps = %v, want a and b", got)
	}
	if !strings.Contains(got[0].String(), "overlap") {
		t.Errorf("String() = %q", got[0].String())
	}
}

func TestOverlapsAcceptsDisjointAndSameProcess(t *testing.T) {
	a := mustParse(t, "a", "ready\nraise 100 110\nlower 100 200 201\nraise 250 251\nlower 250 260 261\n")
	b := mustParse(t, "b", "ready\nraise 202 203\nlower 202 240 241\n")
	if got := Overlaps(Spans(map[string]Report{"a": a, "b": b}, nil)); len(got) != 0 {
		t.Fatalf("Overlaps = %v, want none", got)
	}
}

func TestKilledOpenIntervalLastsUntilTheKill(t *testing.T) {
	// a was raised, then SIGKILLed at 500 before writing "lower"; b raised
	// at 400, before the kill: an overlap the report alone cannot show.
	a := mustParse(t, "a", "ready\nraise 100 110\nlower 100 2") // the cut last line is ignored
	b := mustParse(t, "b", "ready\nraise 400 401\n")
	reports := map[string]Report{"a": a, "b": b}
	if got := Overlaps(Spans(reports, map[string]int64{"a": 500})); len(got) != 1 {
		t.Fatalf("Overlaps with the kill = %v, want one", got)
	}
	if got := Overlaps(Spans(reports, map[string]int64{"a": 300})); len(got) != 0 {
		t.Fatalf("Overlaps with an earlier kill = %v, want none", got)
	}
}

func TestEndIsConservativeUnlessTheWorkerStalled(t *testing.T) {
	ms := int64(time.Millisecond)
	sampled := Interval{Start: 1, LastTrue: 10 * ms, FirstFalse: 11 * ms}
	if got := sampled.End(0); got != 11*ms {
		t.Errorf("End of a continuously sampled interval = %d, want the first false observation", got)
	}
	stopped := Interval{Start: 1, LastTrue: 10 * ms, FirstFalse: 10*ms + int64(StallGap) + 1}
	if got := stopped.End(0); got != 10*ms {
		t.Errorf("End of a stalled interval = %d, want the last true observation", got)
	}
	open := Interval{Start: 1, LastTrue: 10 * ms}
	if got := open.End(20 * ms); got != 20*ms {
		t.Errorf("End of an open interval killed later = %d, want the kill", got)
	}
}

func TestShiftUndoesAClockOffset(t *testing.T) {
	rep := mustParse(t, "a", "raise 1100 1110\nlower 1100 1200 1201\nraise 1300 1301\n")
	rep.Shift(1000)
	if iv := rep.Intervals[0]; iv.Start != 100 || iv.LastTrue != 200 || iv.FirstFalse != 201 {
		t.Errorf("shifted = %+v", iv)
	}
	if iv := rep.Intervals[1]; iv.FirstFalse != 0 || iv.Start != 300 {
		t.Errorf("shifted open interval = %+v", iv)
	}
}

func TestParseReportRejectsMalformed(t *testing.T) {
	for _, text := range []string{
		"raise 1\n", "raise 2 1\n", "lower 1 2 3\n", "raise 1 2\nraise 3 4\n",
		"raise 1 2\nlower 9 2 3\n", "raise 1 5\nlower 1 4 6\n", "raise 1 2\nlower 1 2 3\nraise 2 3\n",
		"raise -1 2\n", "bogus\n", "\n", "ready 1\n",
		"token 5\n", "raise 1 2\nlower 1 2 3\ntoken 5\n", "raise 1 2\ntoken 0\n", "raise 1 2\ntoken 5 6\n",
	} {
		if _, err := ParseReport("x", strings.NewReader(text)); err == nil {
			t.Errorf("ParseReport(%q) = nil error", text)
		}
	}
}

func TestSharedTokensFindsOneTokenReadByTwoProcesses(t *testing.T) {
	a := mustParse(t, "a", "ready\nraise 100 110\ntoken 7\nlower 100 200 201\nraise 300 301\ntoken 7\ntoken 9\n")
	b := mustParse(t, "b", "ready\nraise 400 401\ntoken 9\nlower 400 500 501\n")
	c := mustParse(t, "c", "ready\nraise 600 601\ntoken 10\n")
	got := SharedTokens(map[string]Report{"a": a, "b": b, "c": c})
	if len(got) != 1 || got[0].Token != 9 || strings.Join(got[0].Processes, ",") != "a,b" {
		t.Fatalf("SharedTokens = %v, want token 9 of a and b", got)
	}
	if !strings.Contains(got[0].String(), "token 9") {
		t.Errorf("String() = %q", got[0].String())
	}
}

func TestSharedTokensAcceptsOneProcessKeepingItsToken(t *testing.T) {
	// a reads token 7 in two runs (its term outlived a lowering), b gets
	// the next one: no token for two terms.
	a := mustParse(t, "a", "raise 100 110\ntoken 7\nlower 100 200 201\nraise 300 301\ntoken 7\nlower 300 310 311\n")
	b := mustParse(t, "b", "raise 400 401\ntoken 8\n")
	if got := SharedTokens(map[string]Report{"a": a, "b": b}); len(got) != 0 {
		t.Fatalf("SharedTokens = %v, want none", got)
	}
}

func TestParseReportKeepsTokensOfTheOpenRun(t *testing.T) {
	rep := mustParse(t, "a", "raise 100 110\ntoken 5\ntoken 5\ntoken 6\nlower 100 200 201\n")
	if got := rep.Intervals[0].Tokens; len(got) != 2 || got[0] != 5 || got[1] != 6 {
		t.Fatalf("Tokens = %v, want [5 6]", got)
	}
}

// FuzzParseReport checks that no input makes the report parser panic, and
// that what it accepts is well-formed: intervals in order, each with
// Start <= LastTrue <= FirstFalse.
func FuzzParseReport(f *testing.F) {
	for _, s := range []string{"ready\nraise 1 2\nlower 1 3 4\n", "raise 5 6\n", "lower 1 2 3", "raise 9223372036854775807 1\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		rep, err := ParseReport("x", strings.NewReader(text))
		if err != nil {
			return
		}
		var prevEnd int64
		for i, iv := range rep.Intervals {
			if iv.Start > iv.LastTrue || (!iv.Open() && iv.FirstFalse < iv.LastTrue) || iv.Start < prevEnd {
				t.Fatalf("accepted a malformed interval %d: %+v", i, iv)
			}
			if iv.Open() && i != len(rep.Intervals)-1 {
				t.Fatalf("open interval %d is not the last", i)
			}
			prevEnd = iv.FirstFalse
		}
	})
}
