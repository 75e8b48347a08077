package prometheus_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	client "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/faultstore"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/memstore"
)

// binary returns the path of a program of the Debian package prometheus,
// or skips the test (fails it under LEADERSHIP_TEST_REQUIRE_DB=1).
func binary(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		msg := name + " not found: install the Debian package prometheus (`apt-get install prometheus`) to run the tests of the alerting rules"
		if testdb.Required() {
			t.Fatalf("%s; %s=1 requires it", msg, testdb.EnvRequire)
		}
		t.Skip(msg)
	}
	return path
}

// promtool runs promtool with args and stdin and returns its output; it
// fails the test if promtool fails.
func promtool(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t, "promtool"), args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestRulesAreValid(t *testing.T) {
	t.Parallel()
	out := promtool(t, "", "check", "rules", "rules.yml")
	t.Log(out)
}

// TestRulesUnitTests runs rules_tests.yml: series that must and must not
// fire each alert, including the moment of a graceful handover.
func TestRulesUnitTests(t *testing.T) {
	t.Parallel()
	out := promtool(t, "", "test", "rules", "rules_tests.yml")
	t.Log(out)
}

// TestMetricsOutputPassesPromtoolAndIsDocumented serves the metrics of
// real flags (a leader, a follower with failed attempts) as a service
// does, checks them with `promtool check metrics`, and checks that every
// metric the rules read exists and every metric is in the README's table.
func TestMetricsOutputPassesPromtoolAndIsDocumented(t *testing.T) {
	promtool := binary(t, "promtool") // skip before starting flags
	reg := client.NewPedanticRegistry()
	store := faultstore.Wrap(memstore.New())
	for _, p := range []string{"a", "b"} {
		f, err := leadership.NewFlag().Store(store).Name("job").Process(p).Lease(time.Second).
			MetricsRegisterer(reg).Build(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
	}
	store.Fail(io.ErrUnexpectedEOF)
	time.Sleep(500 * time.Millisecond) // some failed attempts and renewals
	store.Fail(nil)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(string(body))
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s\non:\n%s", err, out, body)
	}

	var exported []string
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (leadership_\w+)`).FindAllStringSubmatch(string(body), -1) {
		exported = append(exported, m[1])
	}
	if len(exported) < 8 {
		t.Fatalf("only %d leadership metrics exported: %v", len(exported), exported)
	}
	rules, err := os.ReadFile("rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	histogram := regexp.MustCompile(`_(count|sum|bucket)$`)
	for _, m := range regexp.MustCompile(`\bleadership_flag_\w+`).FindAllString(string(rules), -1) {
		if name := histogram.ReplaceAllString(m, ""); !slices.Contains(exported, name) && !slices.Contains(exported, m) {
			t.Errorf("rules.yml reads %s, which flags do not export", m)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range exported {
		if !strings.Contains(string(readme), "| `"+name+"` |") {
			t.Errorf("README's Metrics table lacks a row for %s", name)
		}
	}
}
