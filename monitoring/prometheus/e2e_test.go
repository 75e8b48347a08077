package prometheus_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// Timings of the end-to-end test. The bounds asserted on them are
// correctness bounds for a loaded 2-core machine, not performance targets.
const (
	e2eLease = 2 * time.Second
	// scrapeEvery is both the scrape and the rule evaluation interval.
	scrapeEvery = 200 * time.Millisecond
	// takeoverBound is how soon after a fault another process must lead: a
	// dead term expires one lease after its last renewal, and a follower
	// attempts at that expiry plus jitter, or within a poll (at most
	// lease/3 where notifications do not reach other processes).
	takeoverBound = e2eLease + e2eLease/3 + 3*time.Second
	// noLeaderBound is how soon after the last process stopped
	// LeadershipNoLeader must fire: two leases plus two estimated scrape
	// intervals (estimated high while the processes are young), plus slack.
	noLeaderBound = 30 * time.Second
)

// TestAlertsEndToEnd starts a Prometheus server that loads rules.yml and
// scrapes processes of examples/service sharing one flag on one database
// (PostgreSQL when LEADERSHIP_TEST_POSTGRES_DSN is set, else SQLite), and
// two more that each lead the same flag name on a database of their own.
// It SIGKILLs and SIGTERMs leaders (starting a replacement after each
// fault), then stops every process, and asks Prometheus's HTTP API which
// alerts were ever pending or firing: LeadershipSplitBrain never for the
// shared database but soon for the two separate ones, LeadershipNoLeader
// only after the last process had stopped.
func TestAlertsEndToEnd(t *testing.T) {
	promBin := binary(t, "prometheus")
	began := time.Now()
	dir := t.TempDir()
	svc := filepath.Join(dir, "service")
	if out, err := exec.Command("go", "build", "-o", svc, "../../examples/service").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/service: %v\n%s", err, out)
	}
	dsn, dbName := "sqlite:"+filepath.Join(dir, "main.db"), "SQLite"
	if pg := os.Getenv(testdb.EnvPostgres); pg != "" {
		dsn, dbName = pg, "PostgreSQL"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	flagName := "alerts-e2e-" + hex.EncodeToString(b[:])

	// Three processes run at a time; each fault is followed by a
	// replacement, so six addresses are scraped (a target not started yet
	// is only down).
	const faults = 3
	mainAddrs := freeAddrs(t, 3+faults)
	splitAddrs := freeAddrs(t, 2)
	prom := startPrometheus(t, promBin, dir, mainAddrs, splitAddrs)
	setup := time.Since(began)
	scenario := time.Now()

	c := &services{t: t, bin: svc, dir: dir, name: flagName}
	var running []*service
	for _, a := range mainAddrs[:3] {
		running = append(running, c.start(a, dsn))
	}
	split := []*service{
		c.start(splitAddrs[0], "sqlite:"+filepath.Join(dir, "split-0.db")),
		c.start(splitAddrs[1], "sqlite:"+filepath.Join(dir, "split-1.db")),
	}
	waitFor(t, 15*time.Second, "Prometheus to scrape all five processes", func() bool {
		return len(prom.query(`leadership_flag_state`)) == 5
	})

	// Positive control: two leaders of one name in one job, on two
	// databases.
	splitSince := time.Now()
	waitFor(t, 10*time.Second, "LeadershipSplitBrain to fire for the two databases", func() bool {
		return len(prom.query(`ALERTS{alertname="LeadershipSplitBrain",job="split",alertstate="firing"}`)) == 1
	})
	splitFired := time.Since(splitSince)
	for _, s := range split {
		s.stop(syscall.SIGKILL)
	}

	next := 3
	var takeovers []string
	for i, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM, syscall.SIGKILL} {
		leader := c.leader(running)
		since := time.Now()
		leader.stop(sig)
		running = remove(running, leader)
		var successor *service
		waitFor(t, takeoverBound, fmt.Sprintf("a new leader after fault %d (%v)", i+1, sig), func() bool {
			successor = c.leaderNow(running)
			return successor != nil
		})
		took := time.Since(since)
		running = append(running, c.start(mainAddrs[next], dsn))
		next++
		waitFor(t, 5*time.Second, "Prometheus to see the new leader", func() bool {
			return len(prom.query(fmt.Sprintf(`leadership_flag_state{job="service",instance=%q} == 1`, successor.addr))) == 1
		})
		takeovers = append(takeovers, fmt.Sprintf("%v %v", sig, took.Round(time.Millisecond)))
		if i < faults-1 {
			time.Sleep(time.Second) // let a few scrapes see the new leader settled
		}
	}

	// Every process stops.
	for _, s := range running {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, s := range running {
		s.wait()
	}
	allStopped := time.Now()
	defer func() {
		if t.Failed() { // the parts of LeadershipNoLeader's expression
			for _, q := range []string{`time() - max_over_time(leadership:flag_leader_last_seen:timestamp_seconds[1d])`,
				`max_over_time(leadership:flag_lease_seconds:max[1d])`, `min_over_time(leadership:flag_scrape_interval_seconds:min[1d])`} {
				t.Logf("%s = %v", q, prom.query(q))
			}
		}
	}()
	waitFor(t, noLeaderBound, "LeadershipNoLeader to fire after every process stopped", func() bool {
		return len(prom.query(`ALERTS{alertname="LeadershipNoLeader",job="service",alertstate="firing"}`)) == 1
	})
	noLeaderAfter := time.Since(allStopped)

	// What Prometheus recorded over the whole test, sample by sample.
	if got := prom.query(`ALERTS{alertname="LeadershipSplitBrain",job="service"}[10m]`); len(got) != 0 {
		t.Errorf("LeadershipSplitBrain was pending or firing for the shared database: %v", got)
	}
	first := time.Time{}
	for _, series := range prom.query(`ALERTS{alertname="LeadershipNoLeader",job="service"}[10m]`) {
		for _, v := range series.Values {
			if ts := v.time(); first.IsZero() || ts.Before(first) {
				first = ts
			}
		}
	}
	if first.Before(allStopped) {
		t.Errorf("LeadershipNoLeader was active at %v, %v before the last process stopped",
			first.Format(time.RFC3339Nano), allStopped.Sub(first))
	}
	naive := 0
	for _, series := range prom.query(fmt.Sprintf(`(sum(leadership_flag_state{job="service"}) > 1)[10m:%v]`, scrapeEvery)) {
		naive += len(series.Values)
	}
	prom.checkRulesHealthy()
	scrapes := prom.query(`sum(sum_over_time(up{job="service"}[10m]))`)
	t.Logf("%s, %d processes, lease %v, scrape and evaluation every %v", dbName, 3+faults, e2eLease, scrapeEvery)
	t.Logf("setup (build, Prometheus ready) %v; scenario %v", setup.Round(time.Millisecond), time.Since(scenario).Round(time.Millisecond))
	t.Logf("takeovers: %s", strings.Join(takeovers, ", "))
	t.Logf("LeadershipSplitBrain fired %v after the two separate databases' processes started; never for the shared one",
		splitFired.Round(time.Millisecond))
	t.Logf("LeadershipNoLeader first active %v after the last process stopped (firing seen after %v)",
		first.Sub(allStopped).Round(time.Millisecond), noLeaderAfter.Round(time.Millisecond))
	t.Logf("the naive sum(leadership_flag_state) > 1 was true at %d evaluation steps; %v successful scrapes of the shared flag's processes",
		naive, scrapes[0].Value[1])
}

// services starts processes of examples/service.
type services struct {
	t    *testing.T
	bin  string
	dir  string
	name string
}

type service struct {
	t    *testing.T
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// start starts a service on addr and waits until it answers. A service
// whose first attempt failed (a loaded database) exits; it is started
// again, as systemd's Restart= would, up to three times.
func (c *services) start(addr, dsn string) *service {
	c.t.Helper()
	logFile := filepath.Join(c.dir, "service-"+strings.ReplaceAll(addr, ":", "_")+".log")
	log, err := os.Create(logFile)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { log.Close() })
	for try := 1; ; try++ {
		cmd := exec.Command(c.bin, "-addr", addr, "-dsn", dsn, "-name", c.name, "-lease", e2eLease.String(), "-schedule", "* * * * * *")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			c.t.Fatal(err)
		}
		s := &service{t: c.t, addr: addr, cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(s.done) }()
		c.t.Cleanup(func() { _ = cmd.Process.Kill(); <-s.done })
		deadline := time.Now().Add(20 * time.Second)
		for {
			if code, _ := get("http://" + addr + "/healthz"); code == http.StatusOK {
				return s
			}
			exited := false
			select {
			case <-s.done:
				exited = true
			default:
			}
			if exited && try < 3 {
				break
			}
			if exited || time.Now().After(deadline) {
				out, _ := os.ReadFile(logFile)
				c.t.Fatalf("service at %s did not answer /healthz (try %d); its log:\n%s", addr, try, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (s *service) stop(sig syscall.Signal) {
	_ = s.cmd.Process.Signal(sig)
	s.wait()
}

func (s *service) wait() {
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		s.t.Fatalf("service at %s did not exit", s.addr)
	}
}

// leaderNow is the one process answering /leader with 200, or nil.
func (c *services) leaderNow(running []*service) *service {
	var leader *service
	for _, s := range running {
		if code, _ := get("http://" + s.addr + "/leader"); code == http.StatusOK {
			if leader != nil {
				c.t.Fatalf("%s and %s both answer /leader", leader.addr, s.addr)
			}
			leader = s
		}
	}
	return leader
}

func (c *services) leader(running []*service) *service {
	var leader *service
	waitFor(c.t, takeoverBound, "a leader", func() bool {
		leader = c.leaderNow(running)
		return leader != nil
	})
	return leader
}

func remove(list []*service, s *service) []*service {
	var out []*service
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// prometheus is a Prometheus server started by the test.
type prometheus struct {
	t   *testing.T
	url string
}

// startPrometheus writes a configuration scraping the services (job
// "service" for the shared database, job "split" for the others) and
// evaluating rules.yml, and starts Prometheus on loopback with its
// storage in dir.
func startPrometheus(t *testing.T, bin, dir string, mainAddrs, splitAddrs []string) *prometheus {
	t.Helper()
	rules, err := filepath.Abs("rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	quote := func(addrs []string) string {
		q := make([]string, len(addrs))
		for i, a := range addrs {
			q[i] = strconv.Quote(a)
		}
		return strings.Join(q, ", ")
	}
	config := fmt.Sprintf(`global:
  scrape_interval: %[1]v
  scrape_timeout: %[1]v
  evaluation_interval: %[1]v
rule_files: [%[2]q]
scrape_configs:
  - job_name: service
    static_configs: [{targets: [%[3]s]}]
  - job_name: split
    static_configs: [{targets: [%[4]s]}]
`, scrapeEvery, rules, quote(mainAddrs), quote(splitAddrs))
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddrs(t, 1)[0]
	logFile := filepath.Join(dir, "prometheus.log")
	log, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+configFile, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			out, _ := os.ReadFile(logFile)
			t.Logf("prometheus log:\n%s", out)
		}
	})
	p := &prometheus{t: t, url: "http://" + addr}
	waitFor(t, 30*time.Second, "Prometheus to be ready", func() bool {
		code, _ := get(p.url + "/-/ready")
		return code == http.StatusOK
	})
	return p
}

// series is one result of a query: a value (instant vector) or values
// (range vector).
type series struct {
	Metric map[string]string `json:"metric"`
	Value  sample            `json:"value"`
	Values []sample          `json:"values"`
}

// sample is [unix seconds, "value"].
type sample [2]any

func (s sample) time() time.Time {
	sec, _ := s[0].(float64)
	return time.UnixMilli(int64(sec * 1000))
}

// query evaluates expr now through the HTTP API.
func (p *prometheus) query(expr string) []series {
	p.t.Helper()
	var resp struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []series `json:"result"`
		} `json:"data"`
	}
	p.get("/api/v1/query?query="+url.QueryEscape(expr), &resp)
	if resp.Status != "success" {
		p.t.Fatalf("query %s: %s", expr, resp.Error)
	}
	return resp.Data.Result
}

// checkRulesHealthy fails the test if a rule's last evaluation failed.
func (p *prometheus) checkRulesHealthy() {
	p.t.Helper()
	var resp struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	p.get("/api/v1/rules", &resp)
	n := 0
	for _, g := range resp.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				p.t.Errorf("rule %s: health %q, %s", r.Name, r.Health, r.LastError)
			}
		}
	}
	if n != 9 {
		p.t.Errorf("Prometheus loaded %d rules, want 9", n)
	}
}

func (p *prometheus) get(path string, into any) {
	p.t.Helper()
	code, body := get(p.url + path)
	if code != http.StatusOK {
		p.t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal(body, into); err != nil {
		p.t.Fatalf("GET %s: %v", path, err)
	}
}

var httpClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// get returns the status and body of a GET, or 0 when nothing answers.
func get(u string) (int, []byte) {
	resp, err := httpClient.Get(u)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, []byte(b.String())
}

func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return addrs
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
