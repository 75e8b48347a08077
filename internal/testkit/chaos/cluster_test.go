//go:build unix

package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dbflag/leadership/internal/storeopen"
)

// Timings of the scenarios. The bounds asserted on them are correctness
// bounds for a loaded 2-core CI machine, not performance targets.
const (
	lease = time.Second
	poll  = 250 * time.Millisecond
	// slack is added to every liveness bound.
	slack = 1500 * time.Millisecond
	// crashBound is how soon after a holder dies another must raise: the
	// dead term expires at most one lease after the kill, and a follower
	// attempts at that expiry (plus jitter) or at its next poll.
	crashBound = lease + poll + slack
	// handoverBound is how soon after a graceful close another must
	// raise: the release is seen at the next poll (or at once on
	// PostgreSQL, by NOTIFY).
	handoverBound = poll + slack
)

// workerBin is the worker program, built once by TestMain.
var workerBin string

// buildWorker compiles ./worker into dir.
func buildWorker(dir string) (string, error) {
	bin := filepath.Join(dir, "worker")
	goTool := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	cmd := exec.Command(goTool, "build", "-o", bin, "./worker")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./worker: %v\n%s", err, out)
	}
	return bin, nil
}

// cluster runs worker processes competing for one flag and checks their
// reports when the test ends.
type cluster struct {
	t    *testing.T
	dsn  string
	name string

	mu      sync.Mutex
	workers map[string]*worker
	killed  map[string]int64 // process -> CLOCK_MONOTONIC just after it died
	seq     int
	// wantOverlap and wantSharedToken invert the checks, for the test of
	// the harness itself.
	wantOverlap, wantSharedToken bool
	// wantViolation inverts the check for a mutant run: at least one
	// overlap or one token shared by two processes must be found.
	wantViolation bool
	// workerArgs are added to every worker's command line.
	workerArgs []string
	// failovers are the takeovers forced by faults: how long after each
	// fault the next leader raised, by fault. Printed at the end.
	failovers map[string][]time.Duration
}

type worker struct {
	id     string
	cmd    *exec.Cmd
	offset int64 // how far its CLOCK_MONOTONIC runs ahead of ours
	mu     sync.Mutex
	out    bytes.Buffer
	errOut bytes.Buffer
	done   chan struct{} // closed when the process has exited
	err    error
}

// report parses what the worker wrote so far, in our clock.
func (w *worker) report() Report {
	w.mu.Lock()
	text := w.out.String()
	w.mu.Unlock()
	rep, err := ParseReport(w.id, strings.NewReader(text))
	if err != nil {
		panic(err) // the worker is ours: a malformed report is a bug
	}
	rep.Shift(w.offset)
	return rep
}

func (w *worker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// newCluster migrates the store dsn names and returns a cluster on a flag
// name unique to this test run. Workers left running are killed and all
// reports checked when the test ends.
func newCluster(t *testing.T, dsn string) *cluster {
	t.Helper()
	migrate(t, dsn)
	var b [6]byte
	_, _ = rand.Read(b[:])
	c := &cluster{t: t, dsn: dsn, name: "chaos-" + hex.EncodeToString(b[:]),
		workers: map[string]*worker{}, killed: map[string]int64{}, failovers: map[string][]time.Duration{}}
	t.Cleanup(c.finish)
	return c
}

// migrate applies the schema to the store dsn names.
func migrate(t *testing.T, dsn string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := storeopen.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", storeopen.Redact(dsn), err)
	}
	err = o.Store.Migrate(ctx)
	o.Close()
	if err != nil {
		t.Fatalf("migrate %s: %v", storeopen.Redact(dsn), err)
	}
}

// start starts a worker on dsn (the cluster's unless given) and waits
// until its flag is built. prefix runs it under another command (unshare);
// offset is how far that makes its CLOCK_MONOTONIC run ahead.
func (c *cluster) start(dsn string, offset int64, prefix ...string) string {
	c.t.Helper()
	if dsn == "" {
		dsn = c.dsn
	}
	c.mu.Lock()
	c.seq++
	id := fmt.Sprintf("w%d", c.seq)
	c.mu.Unlock()
	args := append(prefix, workerBin, "-dsn", dsn, "-name", c.name, "-lease", lease.String(), "-poll", poll.String())
	args = append(args, c.workerArgs...)
	w := &worker{id: id, offset: offset, done: make(chan struct{})}
	w.cmd = exec.Command(args[0], args[1:]...)
	w.cmd.Stdout = &lockedWriter{mu: &w.mu, w: &w.out}
	w.cmd.Stderr = &lockedWriter{mu: &w.mu, w: &w.errOut}
	if err := w.cmd.Start(); err != nil {
		c.t.Fatalf("start worker: %v", err)
	}
	go func() { w.err = w.cmd.Wait(); close(w.done) }()
	c.mu.Lock()
	c.workers[id] = w
	c.mu.Unlock()
	for deadline := time.Now().Add(45 * time.Second); !w.report().Ready; time.Sleep(5 * time.Millisecond) {
		if w.exited() || time.Now().After(deadline) {
			c.t.Fatalf("worker %s did not build its flag: %v; stderr: %s", id, w.err, w.stderr())
		}
	}
	return id
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (w *worker) stderr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errOut.String()
}

func (c *cluster) worker(id string) *worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.workers[id]
}

// reports returns what every worker, live or not, has reported so far.
func (c *cluster) reports() map[string]Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	reps := make(map[string]Report, len(c.workers))
	for id, w := range c.workers {
		reps[id] = w.report()
	}
	return reps
}

// raisedSince returns a live worker not in exclude whose report shows an
// open run of true observations that started at or after since, and that
// start.
func (c *cluster) raisedSince(since int64, exclude ...string) (string, int64) {
	c.mu.Lock()
	ws := make([]*worker, 0, len(c.workers))
	for _, w := range c.workers {
		ws = append(ws, w)
	}
	c.mu.Unlock()
	sort.Slice(ws, func(i, j int) bool { return ws[i].id < ws[j].id })
	for _, w := range ws {
		if slices.Contains(exclude, w.id) || w.exited() {
			continue
		}
		rep := w.report()
		if k := len(rep.Intervals); k > 0 && rep.Intervals[k-1].Open() && rep.Intervals[k-1].Start >= since {
			return w.id, rep.Intervals[k-1].Start
		}
	}
	return "", 0
}

// waitLeader waits up to limit for a worker not in exclude to raise at or
// after since, and returns it and how long after since it raised.
func (c *cluster) waitLeader(limit time.Duration, since int64, exclude ...string) (string, time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if id, at := c.raisedSince(since, exclude...); id != "" {
			return id, time.Duration(at - since)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no new leader within %v", limit)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// leader waits for any worker to be raised and returns it.
func (c *cluster) leader() string {
	c.t.Helper()
	id, _ := c.waitLeader(lease+slack, 0)
	return id
}

// signal sends sig to worker id.
func (c *cluster) signal(id string, sig syscall.Signal) {
	c.t.Helper()
	if err := c.worker(id).cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %v to %s: %v", sig, id, err)
	}
}

// kill SIGKILLs worker id and waits for it to die. It returns when the
// signal was sent (CLOCK_MONOTONIC) and records when the process was known
// dead, which the checker uses as the end of its open run.
func (c *cluster) kill(id string) int64 {
	c.t.Helper()
	w := c.worker(id)
	at := Mono()
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
	dead := Mono()
	c.mu.Lock()
	c.killed[id] = dead
	c.mu.Unlock()
	return at
}

// term stops worker id gracefully (SIGTERM: Close, which releases) and
// returns when it was asked to stop.
func (c *cluster) term(id string) int64 {
	c.t.Helper()
	w := c.worker(id)
	at := Mono()
	c.signal(id, syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		c.t.Fatalf("worker %s did not exit 10 s after SIGTERM", id)
	}
	if w.err != nil {
		c.t.Errorf("worker %s exited with %v: %s", id, w.err, w.stderr())
	}
	return at
}

// resume sends SIGCONT to worker id, frozen by SIGSTOP while raised, and
// waits until it reports its run ended: it must find its flag lowered at
// its first sample. Scenarios must not kill a resumed worker before that,
// or the checker would rightly extend its open run to the kill.
func (c *cluster) resume(id string) {
	c.t.Helper()
	resumed := Mono() // before SIGCONT: the worker may sample before signal returns
	c.signal(id, syscall.SIGCONT)
	for deadline := time.Now().Add(slack); ; time.Sleep(time.Millisecond) {
		rep := c.worker(id).report()
		iv := rep.Intervals[len(rep.Intervals)-1]
		if !iv.Open() {
			if iv.FirstFalse < resumed {
				c.t.Errorf("the frozen worker %s reported its lowering before SIGCONT", id)
			}
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the resumed worker %s still reports its flag raised %v after SIGCONT", id, slack)
		}
	}
}

// record counts a takeover forced by a fault and how long after the fault
// the next leader raised.
func (c *cluster) record(fault string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failovers[fault] = append(c.failovers[fault], d)
}

// finish stops the workers, checks the reports of all of them for
// overlaps and for tokens shared by two processes, and prints the figures.
func (c *cluster) finish() {
	c.mu.Lock()
	ws := c.workers
	c.mu.Unlock()
	for id, w := range ws {
		if !w.exited() {
			_ = w.cmd.Process.Signal(syscall.SIGCONT) // in case a scenario failed while it was stopped
			c.kill(id)
		}
	}
	reports := c.reports()
	raises := 0
	for _, rep := range reports {
		raises += len(rep.Intervals)
	}
	overlaps := Overlaps(Spans(reports, c.killed))
	shared := SharedTokens(reports)
	found, foundShared := len(overlaps), len(shared)
	if c.wantViolation {
		if found+foundShared == 0 {
			c.t.Errorf("the mutant run found neither an overlap nor a shared token: the scenario has no teeth")
		}
		for i, o := range overlaps {
			if i < 3 {
				c.t.Logf("violation found, as the mutant must: %v", o)
			}
		}
		for i, s := range shared {
			if i < 3 {
				c.t.Logf("violation found, as the mutant must: %v", s)
			}
		}
		overlaps, shared = nil, nil
	}
	if c.wantOverlap {
		if len(overlaps) == 0 {
			c.t.Errorf("the checker found no overlap where two processes led at once")
		}
		overlaps = nil
	}
	if c.wantSharedToken {
		if len(shared) == 0 {
			c.t.Errorf("the checker found no token shared where two processes led with version 1")
		}
		shared = nil
	}
	for i, s := range shared {
		if i == 10 {
			c.t.Errorf("… %d shared tokens in all", len(shared))
			break
		}
		c.t.Errorf("SAFETY VIOLATION: %v", s)
	}
	for i, o := range overlaps {
		if i == 10 {
			c.t.Errorf("… %d overlaps in all", len(overlaps))
			break
		}
		c.t.Errorf("SAFETY VIOLATION: %v", o)
	}
	takeovers := 0
	faults := make([]string, 0, len(c.failovers))
	for f, ds := range c.failovers {
		takeovers += len(ds)
		faults = append(faults, f)
	}
	c.t.Logf("%s: %d processes, %d raises, %d takeovers forced, %d overlaps, %d shared tokens", c.t.Name(), len(ws), raises, takeovers, found, foundShared)
	sort.Strings(faults)
	for _, f := range faults {
		c.t.Logf("  new leader after %s: %s", f, summarize(c.failovers[f]))
	}
}

// summarize describes durations: min, median, p99, max.
func summarize(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) time.Duration { return s[int(p*float64(len(s)-1))].Round(time.Millisecond) }
	return fmt.Sprintf("min %v median %v p99 %v max %v (n=%d)", q(0), q(0.5), q(0.99), q(1), len(s))
}
