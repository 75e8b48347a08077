//go:build linux

package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// TestQuarantine: `leadership quarantine` holds every flag, so `run` does
// not start a command until the hold ends; `status` shows the hold; a
// store without a guard says so; a duration that is not positive is a
// usage error.
func TestQuarantine(t *testing.T) {
	t.Parallel()
	for name, dsn := range map[string]func(t *testing.T) string{
		"postgres": func(t *testing.T) string { return testdb.FreshPostgres(t) },
		"mysql": func(t *testing.T) string {
			dsn, err := storeopen.MySQLURL(freshMySQL(t))
			if err != nil {
				t.Fatal(err)
			}
			return dsn
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dsn := dsn(t)
			if code, _, errs := cli(t, "migrate", "--dsn", dsn); code != 0 {
				t.Fatalf("migrate = %d: %s", code, errs)
			}
			start := time.Now()
			code, out, errs := cli(t, "quarantine", "--dsn", dsn, "--for", "10s")
			if code != 0 || !strings.HasPrefix(out, "no new term starts before ") {
				t.Fatalf("quarantine = %d, %q, %q", code, out, errs)
			}
			if code, out, errs := cli(t, "status", "--dsn", dsn); code != 0 || !strings.Contains(out, "hold: no new term starts for ") {
				t.Fatalf("status during a hold = %d, %q, %q; want the hold shown", code, out, errs)
			}
			code, out, errs = cli(t, "status", "--dsn", dsn, "--json")
			var js struct {
				Now       time.Time  `json:"database_now"`
				HoldUntil *time.Time `json:"hold_until"`
			}
			if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || js.HoldUntil == nil ||
				js.HoldUntil.Sub(js.Now) <= 0 || js.HoldUntil.Sub(js.Now) > 10*time.Second {
				t.Fatalf("status --json during a hold = %d, %q, %q; want hold_until at most 10 s after database_now, and after it", code, out, errs)
			}
			if code, out, errs := cli(t, "run", "--dsn", dsn, "--name", "held", "--wait", "1s", "--", "echo", "ran"); code != 0 || strings.Contains(out, "ran") || !strings.Contains(errs, "failover hold") {
				t.Fatalf("run during a hold = %d, %q, %q; want the command not started, and the log naming the possible hold", code, out, errs)
			}
			code, out, errs = cli(t, "run", "--dsn", dsn, "--name", "held", "--wait", "30s", "--", "echo", "ran")
			if code != 0 || !strings.Contains(out, "ran") {
				t.Fatalf("run after the hold = %d, %q, %q; want the command run", code, out, errs)
			}
			if took := time.Since(start); took < 9500*time.Millisecond {
				t.Fatalf("the command ran %v after quarantine --for 10s", took)
			}
		})
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dsn := "sqlite:" + t.TempDir() + "/flags.db"
		if code, _, errs := cli(t, "quarantine", "--dsn", dsn); code != exitFailure || !strings.Contains(errs, "no failover guard") {
			t.Fatalf("quarantine on SQLite = %d, %q; want exit 1 saying it has no guard", code, errs)
		}
	})
	t.Run("usage", func(t *testing.T) {
		t.Parallel()
		if code, _, errs := cli(t, "quarantine", "--for", "0s"); code != exitUsage || !strings.Contains(errs, "positive") {
			t.Fatalf("quarantine --for 0s = %d, %q; want a usage error", code, errs)
		}
	})
}
