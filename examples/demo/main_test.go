package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemoAsAUserRunsIt builds and runs the demo of the README's first
// command and checks the story it tells: three terms, one leader at a
// time, in order.
func TestDemoAsAUserRunsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes about 12 s")
	}
	bin := filepath.Join(t.TempDir(), "demo")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	text := string(out)
	last, err := checkLeaders(text)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if last != 3 || !strings.Contains(text, "Done: one leader at a time") {
		t.Fatalf("want three terms and the closing line, got:\n%s", text)
	}
}

// TestCheckLeadersComparesTokensAsNumbers checks the checker itself:
// tokens are numbers, so 10 follows 9 (as strings, "10" < "9").
func TestCheckLeadersComparesTokensAsNumbers(t *testing.T) {
	lines := func(tokens ...int) string {
		var b strings.Builder
		for i, tok := range tokens {
			fmt.Fprintf(&b, "00:00  worker-%d LEADER (token %d): running the job\n", i%3+1, tok)
		}
		return b.String()
	}
	if last, err := checkLeaders(lines(8, 9, 10, 11)); err != nil || last != 11 {
		t.Errorf("tokens 8, 9, 10, 11: last %d, error %v; want 11 and no error", last, err)
	}
	if _, err := checkLeaders(lines(9, 10, 9)); err == nil {
		t.Error("tokens 9, 10, 9: no error; want the token that went backwards")
	}
	if _, err := checkLeaders("00:00  worker-1 LEADER (token 4): x\n00:01  worker-2 LEADER (token 4): x\n"); err == nil {
		t.Error("two workers with token 4: no error")
	}
}

var leaderLine = regexp.MustCompile(`(worker-\d) LEADER \(token (\d+)\)`)

// checkLeaders checks the demo's leader lines in order: a token never
// goes backwards and no two workers lead with the same token. It returns
// the last token, 0 if none.
func checkLeaders(text string) (last int64, err error) {
	lastWorker := ""
	for _, m := range leaderLine.FindAllStringSubmatch(text, -1) {
		tok, err := strconv.ParseInt(m[2], 10, 64)
		if err != nil {
			return last, fmt.Errorf("token %q: %v", m[2], err)
		}
		if tok < last {
			return last, fmt.Errorf("token went backwards: %d after %d", tok, last)
		}
		if tok == last && m[1] != lastWorker {
			return last, fmt.Errorf("two workers led with token %d", tok)
		}
		last, lastWorker = tok, m[1]
	}
	return last, nil
}
