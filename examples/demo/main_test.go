package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
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
	leaderLine := regexp.MustCompile(`(worker-\d) LEADER \(token (\d+)\)`)
	lastToken, lastWorker := "0", ""
	for _, m := range leaderLine.FindAllStringSubmatch(text, -1) {
		if m[2] < lastToken {
			t.Fatalf("token went backwards: %s after %s\n%s", m[2], lastToken, text)
		}
		if m[2] == lastToken && m[1] != lastWorker {
			t.Fatalf("two workers led with token %s\n%s", m[2], text)
		}
		lastToken, lastWorker = m[2], m[1]
	}
	if lastToken != "3" || !strings.Contains(text, "Done: one leader at a time") {
		t.Fatalf("want three terms and the closing line, got:\n%s", text)
	}
}
