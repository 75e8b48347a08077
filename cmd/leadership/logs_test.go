//go:build linux

package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLogFormats runs a command under the flag with each log format and
// checks that stderr carries the flag's records in that format (every line
// of --log-format json one JSON object) while the command's stdout passes
// through untouched.
func TestLogFormats(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "flags.db")

	code, out, errs := cli(t, "run", "--dsn", dsn, "--name", "logs", "--log-format", "json", "--log-level", "debug",
		"--", "sh", "-c", "echo from-the-command")
	if code != 0 || out != "from-the-command\n" {
		t.Fatalf("json run: exit %d, stdout %q, want 0 and the command's line; stderr:\n%s", code, out, errs)
	}
	seen := map[string]map[string]any{}
	for line := range strings.SplitSeq(strings.TrimSpace(errs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("stderr line is not JSON (%v): %q", err, line)
		}
		for _, key := range []string{"time", "level", "msg"} {
			if _, ok := rec[key]; !ok {
				t.Errorf("JSON record without %q: %q", key, line)
			}
		}
		msg, _ := rec["msg"].(string)
		seen[msg] = rec
	}
	for _, msg := range []string{"flag starting", "flag raised", "flag released"} {
		rec, ok := seen[msg]
		if !ok {
			t.Fatalf("no %q record in the JSON log; stderr:\n%s", msg, errs)
		}
		if rec["flag"] != "logs" {
			t.Errorf("%q record has flag %v, want \"logs\"", msg, rec["flag"])
		}
	}
	// Durations are nanoseconds in slog's JSON: the default 15 s lease.
	if got := seen["flag starting"]["lease"]; got != float64(15*time.Second) {
		t.Errorf("\"flag starting\" lease = %v, want %d (15s in nanoseconds)", got, 15*time.Second)
	}

	code, out, errs = cli(t, "run", "--dsn", dsn, "--name", "logs", "--log-format", "text",
		"--", "sh", "-c", "echo from-the-command; echo to-stderr >&2")
	if code != 0 || out != "from-the-command\n" {
		t.Fatalf("text run: exit %d, stdout %q; stderr:\n%s", code, out, errs)
	}
	if !strings.Contains(errs, "\nto-stderr\n") {
		t.Errorf("the command's stderr line is not passed through on a line of its own; stderr:\n%s", errs)
	}
	if !strings.Contains(errs, `level=INFO msg="flag raised" flag=logs`) {
		t.Errorf("text log lacks the raise record in key=value form; stderr:\n%s", errs)
	}
	if strings.Contains(errs, "flag starting") {
		t.Errorf("the Debug record \"flag starting\" appeared at the default level info; stderr:\n%s", errs)
	}

	code, _, errs = cli(t, "run", "--dsn", dsn, "--name", "logs", "--log-format", "xml", "--", "true")
	if code != exitUsage || !strings.Contains(errs, "--log-format") {
		t.Errorf("--log-format xml: exit %d, stderr %q; want %d naming --log-format", code, errs, exitUsage)
	}
}
