package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	peer "github.com/openshift-online/ocm-sdk-go/leadership"
	"github.com/openshift-online/ocm-sdk-go/logging"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/memstore"
	"github.com/dbflag/leadership/sqlite"
)

// loadavg is the first three fields of /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func mysqlVersion(ctx context.Context, url string) (string, error) {
	native, err := storeopen.MySQLNative(url)
	if err != nil {
		return "", err
	}
	db, err := sql.Open("mysql", native)
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var v string
	err = db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v)
	return "MySQL/MariaDB " + v, err
}

func sqliteVersion(path string) (string, error) {
	db, err := sqlite.Open(path)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var v string
	err = db.QueryRow("SELECT sqlite_version()").Scan(&v)
	return "SQLite " + v + " (modernc.org/sqlite, WAL, one file shared by the processes)", err
}

func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
		if len(f) >= 2 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			mem = fmt.Sprintf(", %.1f GiB RAM", kb/1024/1024)
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	clock := ""
	if b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource"); err == nil {
		clock = ", clocksource " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d cores (%s)%s%s%s, %s", runtime.NumCPU(), model, mem, kernel, clock, runtime.Version())
}

// benchResult is one Go benchmark: ns/op and allocs/op per repetition.
type benchResult struct {
	name   string
	ns     []float64
	allocs []int64
	// base is the ns/op of a bare time.Since, timed in the same way
	// (serial or parallel) right after each repetition of ns.
	base []float64
	err  error
}

// ratios returns ns/op divided by the baseline's, repetition by
// repetition.
func (br benchResult) ratios() []float64 {
	out := make([]float64, 0, len(br.ns))
	for i := range min(len(br.ns), len(br.base)) {
		if br.base[i] > 0 {
			out = append(out, br.ns[i]/br.base[i])
		}
	}
	return out
}

// raisedBenchmarks times Raised() of both flags with the testing harness,
// in this process, five times each: ours on the in-memory store (Raised
// never touches the store), the peer on PostgreSQL (it needs one to
// build).
// raisedReps is how many times each Raised() benchmark runs.
func raisedReps(o options) int {
	if o.quick {
		return 2
	}
	return 5
}

// Each repetition is followed by the same benchmark of a bare
// time.Since, the cost of one monotonic clock read, so that Raised() is
// also reported as a ratio to it, measured under the same conditions.
func raisedBenchmarks(ctx context.Context, o options, pg *target, runID string) []benchResult {
	_ = flag.Set("test.benchtime", o.benchtime)
	reps := raisedReps(o)
	serialBench := func(fn func() bool) testing.BenchmarkResult {
		return testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = fn()
			}
		})
	}
	parallelBench := func(fn func() bool) testing.BenchmarkResult {
		return testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_ = fn()
				}
			})
		})
	}
	origin := time.Now()
	since := func() bool { return time.Since(origin) < 0 }
	perOp := func(r testing.BenchmarkResult) float64 { return float64(r.T.Nanoseconds()) / float64(r.N) }
	run := func(name string, raised func() bool) []benchResult {
		serial := benchResult{name: name + " serial"}
		par := benchResult{name: name + fmt.Sprintf(" parallel (%d goroutines)", runtime.GOMAXPROCS(0))}
		for range reps {
			s := serialBench(raised)
			serial.ns = append(serial.ns, perOp(s))
			serial.allocs = append(serial.allocs, s.AllocsPerOp())
			serial.base = append(serial.base, perOp(serialBench(since)))
			p := parallelBench(raised)
			par.ns = append(par.ns, perOp(p))
			par.allocs = append(par.allocs, p.AllocsPerOp())
			par.base = append(par.base, perOp(parallelBench(since)))
		}
		return []benchResult{serial, par}
	}
	var out []benchResult
	f, err := leadership.NewFlag().Store(memstore.New()).Name("bench").Build(ctx)
	if err != nil {
		out = append(out, benchResult{name: "ours", err: err})
	} else {
		out = append(out, run("ours `Flag.Raised()`", f.Raised)...)
		f.Close()
	}
	if pg == nil {
		return append(out, benchResult{name: "peer `Flag.Raised()`", err: fmt.Errorf("needs PostgreSQL")})
	}
	cfg, err := pgx.ParseConfig(withParam(pg.dsn, "search_path="+peerSchema))
	if err != nil {
		return append(out, benchResult{name: "peer", err: err})
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	logger, _ := logging.NewGoLoggerBuilder().Debug(false).Info(false).Warn(false).Error(false).Build()
	pf, err := peer.NewFlag().Logger(logger).Handle(db).Name("lbench-" + runID + "-raised").
		Process("lbench-raised").Build(ctx)
	if err != nil {
		return append(out, benchResult{name: "peer", err: err})
	}
	defer pf.Close()
	return append(out, run("peer `Flag.Raised()`", pf.Raised)...)
}

// rootBenchmark runs the root module's own benchmark with go test, when
// the go command and the root module are at hand, and returns its output.
func rootBenchmark(benchtime string) string {
	return goBenchmark(".", "Raised", benchtime)
}

// sqliteBenchmark runs the sqlite package's benchmark of concurrent
// renewals of many flags of one store, batched and not.
func sqliteBenchmark() string {
	return goBenchmark("./sqlite", "ConcurrentRenewals", "6400x")
}

// postgresBenchmark runs the postgres package's benchmark of concurrent
// renewals of many flags of one store, one statement for a batch and one
// statement per flag, on the server of dsn.
func postgresBenchmark(dsn string) string {
	return goBenchmark("./postgres", "ConcurrentRenewals", "1s", "LEADERSHIP_TEST_POSTGRES_DSN="+dsn)
}

// mysqlBenchmark runs the mysql package's benchmark of concurrent renewals
// of many flags of one store, one CALL for a batch, one CALL per flag and
// statement mode, on the server of dsn (go-sql-driver's form).
func mysqlBenchmark(dsn string) string {
	return goBenchmark("./mysql", "ConcurrentRenewals", "1s", "LEADERSHIP_TEST_MYSQL_DSN="+dsn)
}

// mysqlFollowBenchmark runs the mysql package's benchmark of graceful
// handovers to a store that follows four leading processes, with a waiter
// on each one's bell and with room for one waiter, on the server of dsn.
func mysqlFollowBenchmark(dsn string) string {
	return goBenchmark("./mysql", "HandoverFromFourStores", "12x", "LEADERSHIP_TEST_MYSQL_DSN="+dsn)
}

// closeManyBenchmarks runs each store's benchmark of a process closing
// its flags at once, on the databases of targets.
func closeManyBenchmarks(targets []target, o options) closeBenchmarks {
	var c closeBenchmarks
	for _, t := range targets {
		switch t.kind {
		case "postgres":
			c.postgres = goBenchmark("./postgres", "CloseMany", "10x", "LEADERSHIP_TEST_POSTGRES_DSN="+t.dsn)
		case "mysql":
			c.mysql = goBenchmark("./mysql", "CloseMany", "10x", "LEADERSHIP_TEST_MYSQL_DSN="+o.my)
		case "sqlite":
			c.sqlite = goBenchmark("./sqlite", "CloseMany", "10x")
		}
	}
	return c
}

// goBenchmark runs the benchmarks matching pattern of the root module's
// package pkg three times with go test, when the go command and the root
// module are at hand, with env added to the environment, and returns the
// lines of its output that give them.
func goBenchmark(pkg, pattern, benchtime string, env ...string) string {
	root, err := filepath.Abs("..")
	if err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join(root, "flag_test.go")); err != nil {
		return ""
	}
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", pattern, "-benchmem", "-benchtime", benchtime, "-count", "3", pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return ""
	}
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Benchmark") || strings.HasPrefix(l, "cpu:") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// loadRow is the steady-state load of one implementation on one database.
type loadRow struct {
	db, impl, settings string
	lease              time.Duration // our Lease, the peer's Interval: the comparison "at equal lease"
	worst              time.Duration // worst-case crash failover, from the source
	leader, followers  []float64     // per second per process: statements on PostgreSQL, our attempts elsewhere
	leaderN            string        // the leader's raw count and window
	err                error
}

// defaultPollCap caps our flag's default PollInterval on a store whose
// release notifications do not reach other processes: 2 s, as documented
// on leadership.FlagBuilder.PollInterval (storetest checks that flags
// choose it).
const defaultPollCap = 2 * time.Second

// defaultPoll is our flag's default PollInterval at lease on a database of
// kind, as the builder chooses it: Lease/3, capped at defaultPollCap,
// except on PostgreSQL, whose NOTIFY of a release reaches every process:
// there it is Lease (followers attempt at the holder's expiry).
func defaultPoll(kind string, lease time.Duration) time.Duration {
	if kind == "postgres" {
		return lease
	}
	return min(lease/3, defaultPollCap)
}

// loadFigure runs three processes per configuration, all configurations
// at once, and counts over the same window.
func loadFigure(targets []target, runID string, o options) []loadRow {
	lease := leadership.DefaultLease
	if o.quick {
		lease = 3 * time.Second
	}
	worst := lease + lease/20 // ours: expiry + at most one jitter
	peerInterval := time.Duration(float64(worst) / 1.6)
	type cfg struct {
		row loadRow
		g   *group
	}
	var cfgs []*cfg
	for _, t := range targets {
		name := fmt.Sprintf("lbench-%s-load-%s", runID, t.kind)
		c := &cfg{row: loadRow{db: t.kind, impl: "ours", lease: lease, worst: worst,
			settings: fmt.Sprintf("Lease %v (defaults: renew %v, poll %v, jitter %v)", lease, lease/3, defaultPoll(t.kind, lease), lease/20)}}
		c.g = newGroup("worker", workerArgs(t, "ours", name+"-ours", lease, 0, 10*time.Millisecond))
		cfgs = append(cfgs, c)
		if t.kind == "postgres" {
			capped := min(lease/3, defaultPollCap)
			c := &cfg{row: loadRow{db: t.kind, impl: "ours", lease: lease, worst: worst,
				settings: fmt.Sprintf("Lease %v, PollInterval %v (the cap that applies to stores without cross-process notifications)", lease, capped)}}
			c.g = newGroup("worker", workerArgs(t, "ours", name+"-ours-poll", lease, capped, 10*time.Millisecond))
			cfgs = append(cfgs, c)
			c = &cfg{row: loadRow{db: t.kind, impl: "peer", lease: peerInterval, worst: time.Duration(1.6 * float64(peerInterval)),
				settings: fmt.Sprintf("Interval %v (check every Interval/2 ±20 %%, takeover after Interval): equal worst-case crash failover", peerInterval.Round(time.Millisecond))}}
			c.g = newGroup("worker", workerArgs(t, "peer", name+"-peer", peerInterval, 0, 10*time.Millisecond))
			cfgs = append(cfgs, c)
			c = &cfg{row: loadRow{db: t.kind, impl: "peer", lease: lease, worst: time.Duration(1.6 * float64(lease)),
				settings: fmt.Sprintf("Interval %v: equal lease", lease)}}
			c.g = newGroup("worker", workerArgs(t, "peer", name+"-peer-lease", lease, 0, 10*time.Millisecond))
			cfgs = append(cfgs, c)
		}
	}
	for _, c := range cfgs {
		if err := c.g.ensure(3, 60*time.Second); err != nil {
			c.row.err = err
		}
	}
	// Warm up past the first renewal and poll cycles, then measure.
	warm := lease
	deadline := time.Now().Add(warm + o.load)
	t0 := time.Now().Add(warm)
	for time.Now().Before(deadline) {
		for _, c := range cfgs {
			c.g.pump(10*time.Millisecond, nil)
		}
	}
	t1 := time.Now()
	// Take the stats line that follows the window, then stop everything.
	for end := t1.Add(1100 * time.Millisecond); time.Now().Before(end); {
		for _, c := range cfgs {
			c.g.pump(10*time.Millisecond, nil)
		}
	}
	for _, c := range cfgs {
		for _, w := range c.g.alive() {
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, c := range cfgs {
		c.g.stopAll()
		for _, w := range c.g.workers {
			var a, b *event
			for i := range w.stats {
				s := &w.stats[i]
				if a == nil && !s.t.Before(t0) {
					a = s
				}
				if !s.t.After(t1) {
					b = s
				}
			}
			if a == nil || b == nil || !b.t.After(a.t) {
				continue
			}
			sec := b.t.Sub(a.t).Seconds()
			// Stats line: S <unixnano> <statements> <attempts> <raised>.
			// Count statements on PostgreSQL, our attempts elsewhere.
			i := 1
			if c.row.db != "postgres" {
				i = 2
			}
			num := func(e *event) float64 { v, _ := strconv.ParseFloat(e.fields[i], 64); return v }
			n := num(b) - num(a)
			switch {
			case a.fields[3] == "1" && b.fields[3] == "1":
				c.row.leaderN = fmt.Sprintf("%.0f in %.1f s", n, sec)
				c.row.leader = append(c.row.leader, n/sec)
			case a.fields[3] == "0" && b.fields[3] == "0":
				c.row.followers = append(c.row.followers, n/sec)
			}
		}
	}
	var rows []loadRow
	for _, c := range cfgs {
		rows = append(rows, c.row)
	}
	return rows
}

// perProcessPerLease is the mean load of the row's three processes (one
// leader, two followers), in statements per process per lease (our Lease,
// the peer's Interval); ok is false when a process was not observed.
func (l loadRow) perProcessPerLease() (v float64, ok bool) {
	if l.err != nil || len(l.leader) != 1 || len(l.followers) != 2 {
		return 0, false
	}
	sum := l.leader[0]
	for _, f := range l.followers {
		sum += f
	}
	return sum / 3 * l.lease.Seconds(), true
}

// scaleStep is one step of the scale figure.
type scaleStep struct {
	pairs, flagsPerProc      int
	attempts, stmts, errs    int64
	lowers                   int64
	raisedStart, raisedEnd   int
	p50, p99, pmax           time.Duration
	window                   time.Duration
	ourBackendsCPU, allPgCPU float64 // cores
	clientCPU                float64 // cores, both processes
	ok                       bool
	backends                 int
	// roundTrips is the number of statements and batches sent (latency
	// samples); the attempt figures are the upper bounds of the attempt
	// histogram's buckets (a flag's whole call, its wait in a batch's
	// queue included).
	roundTrips                          int64
	attemptP50, attemptP99, attemptPmax time.Duration
}

// scaleFigure ramps (process, flag) pairs on PostgreSQL at the default
// lease: two processes, each building every flag of the step, so each
// flag has one holder and one follower.
func scaleFigure(ctx context.Context, t target, runID string, o options) ([]scaleStep, error) {
	var steps []scaleStep
	for _, s := range strings.Split(o.scaleSteps, ",") {
		pairs, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || pairs < 2 {
			return steps, fmt.Errorf("bad -scale step %q", s)
		}
		logf("scale: %d pairs", pairs)
		st, err := scaleOnce(ctx, t, fmt.Sprintf("lbench-%s-scale%d", runID, pairs), pairs, o)
		if err != nil {
			return steps, err
		}
		steps = append(steps, st)
		if !st.ok {
			break
		}
	}
	return steps, nil
}

func scaleOnce(ctx context.Context, t target, prefix string, pairs int, o options) (scaleStep, error) {
	const procs = 2
	st := scaleStep{pairs: pairs, flagsPerProc: pairs / procs}
	g := newGroup("scale-worker", func(id int) []string {
		return []string{"-dsn", t.dsn, "-prefix", prefix, "-process", fmt.Sprintf("%s-p%d", prefix, id),
			"-flags", strconv.Itoa(st.flagsPerProc), "-warm", o.scaleWarm.String(), "-measure", o.scaleMeasure.String()}
	})
	defer deleteFlags(t.dsn, prefix) // deferred first: runs after the workers have stopped
	defer g.stopAll()
	if err := g.ensure(procs, 10*time.Minute); err != nil {
		return st, err
	}
	for _, w := range g.alive() {
		_ = w.cmd.Process.Signal(syscall.SIGUSR1)
	}
	var m0, m1 int
	var c0, all0 float64
	var t0 time.Time
	var ourPids []int
	results := 0
	ok := g.pump(o.scaleWarm+o.scaleMeasure+5*time.Minute, func(ev event) bool {
		switch ev.kind {
		case "M0":
			m0++
			if m0 == procs {
				ourPids = backendPIDs(ctx, t.dsn, prefix)
				c0, all0, t0 = sumCPU(ourPids), sumCPU(postgresPIDs()), time.Now()
			}
		case "M1":
			m1++
			if m1 == 1 {
				st.window = time.Since(t0)
				st.ourBackendsCPU = (sumCPU(ourPids) - c0) / st.window.Seconds()
				st.allPgCPU = (sumCPU(postgresPIDs()) - all0) / st.window.Seconds()
			}
		case "RESULT":
			f := ev.fields
			v := func(i int) int64 { n, _ := strconv.ParseInt(f[i], 10, 64); return n }
			st.attempts += v(1)
			st.stmts += v(2)
			st.errs += v(3)
			st.lowers += v(4)
			st.raisedStart += int(v(5))
			st.raisedEnd += int(v(6))
			st.p50 = max(st.p50, time.Duration(v(7))*time.Microsecond)
			st.p99 = max(st.p99, time.Duration(v(8))*time.Microsecond)
			st.pmax = max(st.pmax, time.Duration(v(9))*time.Microsecond)
			cpu, _ := strconv.ParseFloat(f[10], 64)
			st.clientCPU += cpu
			if len(f) > 14 {
				st.roundTrips += v(11)
				st.attemptP50 = max(st.attemptP50, time.Duration(v(12))*time.Microsecond)
				st.attemptP99 = max(st.attemptP99, time.Duration(v(13))*time.Microsecond)
				st.attemptPmax = max(st.attemptPmax, time.Duration(v(14))*time.Microsecond)
			}
			results++
			return results == procs
		case "EXIT":
			return true
		}
		return false
	})
	if !ok || results < procs {
		return st, fmt.Errorf("scale step %d pairs: workers did not report", pairs)
	}
	st.backends = len(ourPids)
	names := st.flagsPerProc
	st.ok = st.errs == 0 && st.lowers == 0 && st.raisedStart == names && st.raisedEnd == names
	return st, nil
}

// deleteFlags deletes the rows of a scale step, whose names begin with
// prefix, so that steps and runs do not leave hundreds of thousands of
// rows in a database that other programs (a test suite) list.
func deleteFlags(dsn, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		logf("scale: delete the rows of %s: %v", prefix, err)
		return
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "DELETE FROM leadership_flags WHERE starts_with(name, $1)", prefix); err != nil {
		logf("scale: delete the rows of %s: %v", prefix, err)
	}
}

// backendPIDs lists the server processes serving the connections of a
// scale step (by application_name).
func backendPIDs(ctx context.Context, dsn, prefix string) []int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1", "lbench-scale-"+prefix+"%")
	if err != nil {
		return nil
	}
	pids, _ := pgx.CollectRows(rows, pgx.RowTo[int32])
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out
}

// timelineRun is what the timeline scenario recorded.
type timelineRun struct {
	db      string
	lease   time.Duration
	start   time.Time
	end     time.Time
	procs   int
	log     []event
	marks   []mark
	stalled [2]time.Time
	stallID int
	notes   []string
}

type mark struct {
	t     time.Time
	id    int
	label string
}

// timeline runs four processes of ours through a crash, a stall and a
// graceful handover, recording who held the flag when.
func timeline(t target, runID string, o options) (*timelineRun, error) {
	lease := 2 * time.Second
	if o.quick {
		lease = 500 * time.Millisecond
	}
	name := fmt.Sprintf("lbench-%s-timeline-%s", runID, t.kind)
	g := newGroup("worker", workerArgs(t, "ours", name, lease, 0))
	defer g.stopAll()
	tl := &timelineRun{db: t.kind, lease: lease, start: time.Now()}
	if err := g.ensure(3, 60*time.Second); err != nil {
		return nil, err
	}
	h, err := g.waitHolder(3 * lease)
	if err != nil {
		return nil, err
	}
	g.pump(lease, nil)
	// Crash.
	h, _ = g.waitHolder(3 * lease)
	tl.marks = append(tl.marks, mark{time.Now(), h.id, "SIGKILL"})
	if _, err := g.takeover(h, syscall.SIGKILL, 4*lease); err != nil {
		return nil, err
	}
	g.pump(lease/2, nil)
	w4, err := g.spawn()
	if err != nil {
		return nil, err
	}
	tl.marks = append(tl.marks, mark{time.Now(), w4.id, "started"})
	if err := g.ensure(3, 60*time.Second); err != nil {
		return nil, err
	}
	g.pump(lease/2, nil)
	// Stall.
	h, err = g.waitHolder(3 * lease)
	if err != nil {
		return nil, err
	}
	tl.stallID = h.id
	tl.stalled[0] = time.Now()
	tl.marks = append(tl.marks, mark{tl.stalled[0], h.id, "SIGSTOP"})
	_ = h.cmd.Process.Signal(syscall.SIGSTOP)
	var other time.Time
	g.pump(4*lease, func(ev event) bool {
		if ev.kind == "R" && ev.w != h {
			other = ev.t
			return true
		}
		return false
	})
	g.pump(lease/2, nil)
	tl.stalled[1] = time.Now()
	tl.marks = append(tl.marks, mark{tl.stalled[1], h.id, "SIGCONT"})
	_ = h.cmd.Process.Signal(syscall.SIGCONT)
	var lowered time.Time
	first := "unknown"
	g.pump(lease, func(ev event) bool {
		if ev.w == h && ev.kind == "G" && len(ev.fields) == 3 {
			first = ev.fields[2]
		}
		if ev.w == h && ev.kind == "L" {
			lowered = ev.t
			return true
		}
		return false
	})
	if !other.IsZero() {
		tl.notes = append(tl.notes, fmt.Sprintf("stall: another process raised %v after SIGSTOP", other.Sub(tl.stalled[0]).Round(time.Millisecond)))
	}
	if !lowered.IsZero() {
		tl.notes = append(tl.notes, fmt.Sprintf("stall: the first Raised() call of the stopped process after SIGCONT returned %s; it reported false %v after SIGCONT", first, lowered.Sub(tl.stalled[1]).Round(time.Microsecond)))
	}
	g.pump(lease, nil)
	// Graceful handover.
	h, err = g.waitHolder(3 * lease)
	if err != nil {
		return nil, err
	}
	tl.marks = append(tl.marks, mark{time.Now(), h.id, "SIGTERM"})
	d, err := g.takeover(h, syscall.SIGTERM, 4*lease)
	if err != nil {
		return nil, err
	}
	tl.notes = append(tl.notes, fmt.Sprintf("graceful: another process raised %v after SIGTERM", d.Round(time.Microsecond)))
	g.pump(lease, nil)
	tl.end = time.Now()
	tl.procs = len(g.workers)
	tl.log = g.log
	return tl, nil
}

// stallFigure stops the holder with SIGSTOP until another process has
// raised, resumes it with SIGCONT and returns, per round, how long after
// SIGCONT the resumed process still reported Raised() true (until its
// first sample that returned false).
func stallFigure(t target, impl, runID string, lease time.Duration, rounds int, firstTrue *int) ([]time.Duration, error) {
	name := fmt.Sprintf("lbench-%s-stall-%s-%s", runID, impl, t.kind)
	g := newGroup("worker", workerArgs(t, impl, name, lease, 0))
	defer g.stopAll()
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	var ds []time.Duration
	for range rounds {
		h, err := g.holderAfter(3, lease, 4*lease, rnd.Float64)
		if err != nil {
			return ds, err
		}
		_ = h.cmd.Process.Signal(syscall.SIGSTOP)
		if !g.pump(4*lease+10*time.Second, func(ev event) bool { return ev.kind == "R" && ev.w != h }) {
			_ = h.cmd.Process.Signal(syscall.SIGCONT)
			return ds, fmt.Errorf("nobody raised while the holder was stopped")
		}
		g.pump(lease/4, nil)
		tc := time.Now()
		_ = h.cmd.Process.Signal(syscall.SIGCONT)
		var tl time.Time
		if !g.pump(4*lease+10*time.Second, func(ev event) bool {
			if ev.w == h && ev.kind == "G" && len(ev.fields) == 3 && ev.fields[2] == "true" {
				*firstTrue++
			}
			if ev.w == h && ev.kind == "L" {
				tl = ev.t
				return true
			}
			return false
		}) {
			return ds, fmt.Errorf("the resumed process never lowered")
		}
		ds = append(ds, tl.Sub(tc))
		// Retire the resumed process so every round starts alike.
		g.signal(h, syscall.SIGKILL)
		g.pump(10*time.Second, func(event) bool { return h.gone })
	}
	return ds, nil
}
