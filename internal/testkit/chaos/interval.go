package chaos

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// StallGap is the longest gap between the last true observation of a run
// and the first false one that still counts as continuous sampling. A
// worker samples every millisecond; a longer gap means it did not run
// (SIGSTOP, CPU starvation), and then nothing was observed in the gap.
const StallGap = 50 * time.Millisecond

// Interval is one run of consecutive true observations of Raised() by one
// process, in CLOCK_MONOTONIC nanoseconds.
//
// Start is the clock read just before the first call that returned true.
// LastTrue is the clock read just after the last call that returned true.
// FirstFalse is the clock read just after the first call that returned
// false (or after Close returned), 0 while the interval is open.
type Interval struct {
	Process    string
	Start      int64
	LastTrue   int64
	FirstFalse int64
	// Tokens are the fencing tokens (Flag.Token) the process
	// read during the run, in the order it first read each.
	Tokens []int64
}

// Open reports whether the process had not seen the flag lowered when its
// report ended.
func (iv Interval) Open() bool { return iv.FirstFalse == 0 }

// End is the conservative end of the interval used by the checker: the
// first false observation when the worker sampled continuously (the flag
// may have been raised until then), else the last true one (a stopped
// worker observes nothing while stopped). An open interval ends at
// killedAt, the moment the test killed the process (0 if it was not
// killed: then LastTrue).
func (iv Interval) End(killedAt int64) int64 {
	switch {
	case iv.Open() && killedAt > 0:
		return max(killedAt, iv.LastTrue)
	case iv.Open():
		return iv.LastTrue
	case iv.FirstFalse-iv.LastTrue <= int64(StallGap):
		return iv.FirstFalse
	default:
		return iv.LastTrue
	}
}

// Report is what one worker process wrote.
type Report struct {
	Ready     bool       // the flag was built
	Intervals []Interval // in order; the last one may be open
}

// Worker report lines, one event each, times in CLOCK_MONOTONIC ns:
//
//	ready
//	raise START LASTTRUE
//	token TOKEN
//	lower START LASTTRUE FIRSTFALSE
//
// "raise" is written when a run of true observations begins, "lower" when
// it ends; a report cut short by SIGKILL ends with an open "raise".
// "token" belongs to the open run: the fencing token the process read
// while raised, written after the raise and again whenever it changes.

// ParseReport reads a worker's report. process names the intervals. A
// final line without its newline (a write cut by SIGKILL) is ignored.
func ParseReport(process string, r io.Reader) (Report, error) {
	var rep Report
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, err := br.ReadString('\n')
		if err == io.EOF {
			return rep, nil
		}
		if err != nil {
			return rep, err
		}
		if err := rep.apply(process, strings.TrimSuffix(line, "\n")); err != nil {
			return rep, fmt.Errorf("%s report line %d %q: %w", process, n, line, err)
		}
	}
}

func (rep *Report) apply(process, line string) error {
	f := strings.Fields(line)
	if len(f) == 0 {
		return fmt.Errorf("empty line")
	}
	nums := make([]int64, len(f)-1)
	for i, s := range f[1:] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("field %d: not a positive integer", i+2)
		}
		nums[i] = v
	}
	open := len(rep.Intervals) > 0 && rep.Intervals[len(rep.Intervals)-1].Open()
	switch {
	case f[0] == "ready" && len(nums) == 0:
		rep.Ready = true
	case f[0] == "raise" && len(nums) == 2:
		if open {
			return fmt.Errorf("raise while an interval is open")
		}
		if nums[1] < nums[0] {
			return fmt.Errorf("last true before start")
		}
		if k := len(rep.Intervals); k > 0 && nums[0] < rep.Intervals[k-1].FirstFalse {
			return fmt.Errorf("interval starts before the previous one ended")
		}
		rep.Intervals = append(rep.Intervals, Interval{Process: process, Start: nums[0], LastTrue: nums[1]})
	case f[0] == "token" && len(nums) == 1:
		if !open {
			return fmt.Errorf("token without an open interval")
		}
		iv := &rep.Intervals[len(rep.Intervals)-1]
		if !slices.Contains(iv.Tokens, nums[0]) {
			iv.Tokens = append(iv.Tokens, nums[0])
		}
	case f[0] == "lower" && len(nums) == 3:
		if !open {
			return fmt.Errorf("lower without an open interval")
		}
		iv := &rep.Intervals[len(rep.Intervals)-1]
		if nums[0] != iv.Start || nums[1] < iv.LastTrue || nums[2] < nums[1] {
			return fmt.Errorf("times out of order or not matching the raise")
		}
		iv.LastTrue, iv.FirstFalse = nums[1], nums[2]
	default:
		return fmt.Errorf("unknown event or wrong field count")
	}
	return nil
}

// Shift moves all times of the report by -offset: for a worker whose
// CLOCK_MONOTONIC runs offset ns ahead (a time namespace).
func (rep *Report) Shift(offset int64) {
	for i := range rep.Intervals {
		iv := &rep.Intervals[i]
		iv.Start -= offset
		iv.LastTrue -= offset
		if iv.FirstFalse != 0 {
			iv.FirstFalse -= offset
		}
	}
}

// Span is an interval with its conservative end, as the checker uses it.
type Span struct {
	Process    string
	Start, End int64
}

// Spans turns reports into spans, in no particular order: killedAt gives,
// for each process that was killed, when (CLOCK_MONOTONIC ns).
func Spans(reports map[string]Report, killedAt map[string]int64) []Span {
	var out []Span
	for p, rep := range reports {
		for _, iv := range rep.Intervals {
			out = append(out, Span{Process: p, Start: iv.Start, End: iv.End(killedAt[p])})
		}
	}
	return out
}

// Overlap is two spans of different processes that share some instant.
type Overlap struct{ A, B Span }

func (o Overlap) String() string {
	return fmt.Sprintf("%s [%d, %d] and %s [%d, %d] overlap by %v", o.A.Process, o.A.Start, o.A.End,
		o.B.Process, o.B.Start, o.B.End, time.Duration(min(o.A.End, o.B.End)-o.B.Start))
}

// Overlaps returns every pair of spans of different processes that
// intersect (closed intervals). Spans of one process never count.
func Overlaps(spans []Span) []Overlap {
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b Span) int { return cmp.Compare(a.Start, b.Start) })
	var out []Overlap
	for i := range s {
		for j := i + 1; j < len(s) && s[j].Start <= s[i].End; j++ {
			if s[j].Process != s[i].Process {
				out = append(out, Overlap{A: s[i], B: s[j]})
			}
		}
	}
	return out
}

// SharedToken is a fencing token that two or more processes read while
// raised: one token for two terms (each worker process is one holder, so
// its terms never share a token with another process's).
type SharedToken struct {
	Token     int64
	Processes []string // sorted
}

func (s SharedToken) String() string {
	return fmt.Sprintf("token %d raised by %d processes: %s", s.Token, len(s.Processes), strings.Join(s.Processes, ", "))
}

// SharedTokens returns every token that more than one process reported
// while raised, by increasing token. A process that reads one token in
// several runs (a term it kept) does not count twice.
func SharedTokens(reports map[string]Report) []SharedToken {
	by := map[int64][]string{}
	for p, rep := range reports {
		seen := map[int64]bool{}
		for _, iv := range rep.Intervals {
			for _, tok := range iv.Tokens {
				if !seen[tok] {
					seen[tok] = true
					by[tok] = append(by[tok], p)
				}
			}
		}
	}
	var out []SharedToken
	for tok, ps := range by {
		if len(ps) > 1 {
			slices.Sort(ps)
			out = append(out, SharedToken{Token: tok, Processes: ps})
		}
	}
	slices.SortFunc(out, func(a, b SharedToken) int { return cmp.Compare(a.Token, b.Token) })
	return out
}
