// Command bench measures the leadership flag side by side with the flag of
// github.com/openshift-online/ocm-sdk-go (package leadership, the "peer")
// and writes BENCHMARKS.md and a timeline SVG.
//
//	cd bench && go run . -out ../BENCHMARKS.md
//
// It runs against the databases it can reach: PostgreSQL and MySQL/MariaDB
// named by -postgres and -mysql (default: LEADERSHIP_TEST_POSTGRES_DSN and
// LEADERSHIP_TEST_MYSQL_DSN), and SQLite in a temporary file. The peer
// supports PostgreSQL only. -quick runs every figure briefly, for CI.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbflag/leadership/internal/storeopen"
)

// peerSchema keeps the peer's table, also named leadership_flags but with
// other columns, away from ours.
const peerSchema = "lbench_peer"

type options struct {
	out, svg      string
	pg, my        string
	dbs           string
	quick         bool
	rounds        int
	lease         time.Duration
	gracefulLease time.Duration
	load          time.Duration
	scaleSteps    string
	scaleWarm     time.Duration
	scaleMeasure  time.Duration
	scaleOnly     bool
	loadOnly      bool
	gracefulOnly  bool
	takeoversOnly bool
	closeOnly     bool
	benchtime     string
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "worker":
			workerMain(os.Args[2:])
			return
		case "scale-worker":
			scaleWorkerMain(os.Args[2:])
			return
		}
	}
	var o options
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "report to write")
	flag.StringVar(&o.svg, "svg", "", "timeline SVG to write (default: docs/timeline.svg next to -out)")
	flag.StringVar(&o.pg, "postgres", os.Getenv("LEADERSHIP_TEST_POSTGRES_DSN"), "PostgreSQL DSN (postgres://…); empty skips")
	flag.StringVar(&o.my, "mysql", os.Getenv("LEADERSHIP_TEST_MYSQL_DSN"), "MySQL/MariaDB DSN (mysql://… or user:pass@tcp(host:port)/db); empty skips")
	flag.StringVar(&o.dbs, "dbs", "postgres,mysql,sqlite", "databases to use, of postgres,mysql,sqlite")
	flag.BoolVar(&o.quick, "quick", false, "run every figure briefly (CI): few rounds, short windows, one scale step")
	flag.IntVar(&o.rounds, "rounds", 20, "takeovers per crash/graceful figure")
	flag.DurationVar(&o.lease, "lease", 2*time.Second, "lease (ours) and Interval (peer) for the crash failover figure")
	flag.DurationVar(&o.gracefulLease, "graceful-lease", 15*time.Second, "our lease for the graceful handover figure (the default lease: poll interval 15 s on PostgreSQL, 2 s elsewhere)")
	flag.DurationVar(&o.load, "load", 120*time.Second, "steady-state window of the database load figure")
	flag.StringVar(&o.scaleSteps, "scale", "1000,2000,4000,8000,16000,24000,32000,48000", "(process, flag) pairs per scale step; stops at the first step that misses")
	flag.DurationVar(&o.scaleWarm, "scale-warm", 20*time.Second, "wait after building the flags of a scale step")
	flag.BoolVar(&o.scaleOnly, "scale-only", false, "run only the scale figure on PostgreSQL and print its steps (writes no report)")
	flag.BoolVar(&o.loadOnly, "load-only", false, "run only the database load figure and print its rows and the ratios to the peer (writes no report)")
	flag.DurationVar(&o.scaleMeasure, "scale-measure", 30*time.Second, "measurement window of a scale step")
	flag.BoolVar(&o.gracefulOnly, "graceful-only", false, "run only our graceful handover on the first database of -dbs reached (-rounds handovers) and print its figures and the holder's Close times (writes no report)")
	flag.BoolVar(&o.takeoversOnly, "takeovers-only", false, "run only figures 1 and 2 (crash failover, graceful handover), print their samples and write their plots next to -svg (writes no report)")
	flag.BoolVar(&o.closeOnly, "close-only", false, "run only the stores' benchmarks of a process closing 64 flags at once and write their section (7) into the existing -out report, keeping the rest")
	flag.StringVar(&o.benchtime, "benchtime", "1s", "benchtime of the Raised() benchmarks")
	testing.Init() // the -test.* flags the Raised() benchmarks set
	flag.Parse()
	if o.quick {
		o.rounds = 2
		o.lease = 500 * time.Millisecond
		o.gracefulLease = 1500 * time.Millisecond
		o.load = 4 * time.Second
		o.scaleSteps = "200"
		o.scaleWarm = 2 * time.Second
		o.scaleMeasure = 3 * time.Second
		o.benchtime = "100ms"
	}
	if o.svg == "" {
		o.svg = filepath.Join(filepath.Dir(o.out), "docs", "timeline.svg")
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// target is one database the figures run on.
type target struct {
	kind    string // postgres, mysql, sqlite
	dsn     string // storeopen form
	version string
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format("15:04:05")+" "+format+"\n", args...)
}

func run(o options) error {
	ctx := context.Background()
	r := &report{opts: o, started: time.Now().UTC(), loadStart: loadavg()}
	r.machine = machine()
	use := func(k string) bool { return strings.Contains(o.dbs, k) }
	runID := fmt.Sprintf("%d", time.Now().Unix()%1000000)

	var targets []target
	if use("postgres") && o.pg != "" {
		v, err := pgVersion(ctx, o.pg)
		if err != nil {
			r.notes = append(r.notes, fmt.Sprintf("PostgreSQL not measured: %v", err))
		} else {
			targets = append(targets, target{"postgres", o.pg, v})
		}
	} else if use("postgres") {
		r.notes = append(r.notes, "PostgreSQL not measured: no DSN (-postgres or LEADERSHIP_TEST_POSTGRES_DSN); the peer needs PostgreSQL, so no peer figures either.")
	}
	if use("mysql") && o.my != "" {
		u, err := storeopen.MySQLURL(o.my) // LEADERSHIP_TEST_MYSQL_DSN is go-sql-driver's form
		if err == nil {
			var v string
			v, err = mysqlVersion(ctx, u)
			if err == nil {
				targets = append(targets, target{"mysql", u, v})
			}
		}
		if err != nil {
			r.notes = append(r.notes, fmt.Sprintf("MySQL not measured: %v", err))
		}
	} else if use("mysql") {
		r.notes = append(r.notes, "MySQL not measured: no DSN (-mysql or LEADERSHIP_TEST_MYSQL_DSN).")
	}
	if use("sqlite") {
		dir, err := os.MkdirTemp("", "lbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "flags.db")
		v, err := sqliteVersion(path)
		if err != nil {
			r.notes = append(r.notes, fmt.Sprintf("SQLite not measured: %v", err))
		} else {
			targets = append(targets, target{"sqlite", "sqlite:" + path, v})
		}
	}
	r.targets = targets
	var pg *target
	for i := range targets {
		if targets[i].kind == "postgres" {
			pg = &targets[i]
			if err := ensurePeerSchema(ctx, pg.dsn); err != nil {
				return err
			}
		}
	}

	if o.scaleOnly {
		if pg == nil {
			return fmt.Errorf("-scale-only needs PostgreSQL (-postgres or LEADERSHIP_TEST_POSTGRES_DSN)")
		}
		steps, err := scaleFigure(ctx, *pg, runID, o)
		for _, st := range steps {
			fmt.Printf("%+v\n", st)
		}
		return err
	}

	if o.loadOnly {
		logf("database load, %v window", o.load)
		rows := loadFigure(targets, runID, o)
		for _, l := range rows {
			v, _ := l.perProcessPerLease()
			fmt.Printf("%s %s | %s | leader %v | followers %v | per process per lease %.2f | err %v\n", l.db, l.impl, l.settings, l.leader, l.followers, v, l.err)
		}
		fmt.Println(loadRatios(rows))
		return nil
	}
	if o.closeOnly {
		return closeOnly(targets, o)
	}
	if o.gracefulOnly {
		if len(targets) == 0 {
			return fmt.Errorf("-graceful-only needs a database (-dbs, -postgres, -mysql)")
		}
		return gracefulOnly(targets[0], runID, o)
	}
	if o.takeoversOnly {
		return takeoversOnly(r, targets, runID, o)
	}

	// (4) Raised() cost, first: nothing else runs on the machine meanwhile.
	logf("Raised() benchmarks")
	r.raised = raisedBenchmarks(ctx, o, pg, runID)
	if !o.quick {
		r.rootBench = rootBenchmark(o.benchtime)
		r.sqliteBench = sqliteBenchmark()
		if pg != nil {
			r.postgresBench = postgresBenchmark(pg.dsn)
		}
		if slices.ContainsFunc(targets, func(t target) bool { return t.kind == "mysql" }) {
			r.mysqlBench = mysqlBenchmark(o.my)
			r.mysqlFollowBench = mysqlFollowBenchmark(o.my)
		}
		logf("benchmarks of 64 flags closed at once")
		r.closeBench = closeManyBenchmarks(targets, o)
	}

	// (1) crash failover and (2) graceful handover.
	for _, t := range targets {
		c, g := takeovers(t, runID, o)
		r.crash, r.graceful = append(r.crash, c...), append(r.graceful, g...)
		if t.kind == "postgres" {
			for _, impl := range []string{"ours", "peer"} {
				n := max(o.rounds/4, 2)
				logf("stall: %s on %s, %d rounds, lease/interval %v", impl, t.kind, n, o.lease)
				var firstTrue int
				ds, err := stallFigure(t, impl, runID, o.lease, n, &firstTrue)
				r.stall = append(r.stall, result{db: t.kind, impl: impl, lease: o.lease, ds: ds, err: err, firstTrue: firstTrue})
			}
		}
	}

	if err := r.writePlots(filepath.Dir(o.svg), o.out); err != nil {
		return err
	}

	// (3) database load at equal worst-case crash failover.
	logf("database load, %v window", o.load)
	r.load = loadFigure(targets, runID, o)

	// (5) scale on PostgreSQL.
	if pg != nil {
		logf("scale on postgres: steps %s", o.scaleSteps)
		r.scale, r.scaleErr = scaleFigure(ctx, *pg, runID, o)
	}

	// Timeline picture.
	tl := pg
	if tl == nil && len(targets) > 0 {
		tl = &targets[len(targets)-1]
	}
	if tl != nil {
		logf("timeline on %s", tl.kind)
		tlo, err := timeline(*tl, runID, o)
		if err != nil {
			r.notes = append(r.notes, fmt.Sprintf("timeline not drawn: %v", err))
		} else {
			r.timeline = tlo
			if err := os.MkdirAll(filepath.Dir(o.svg), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(o.svg, []byte(tlo.svg()), 0o644); err != nil {
				return err
			}
		}
	}

	r.finished, r.loadEnd = time.Now().UTC(), loadavg()
	if err := os.WriteFile(o.out, []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	logf("wrote %s and %s", o.out, o.svg)
	return nil
}

func workerArgs(t target, impl, name string, lease, poll time.Duration, sample ...time.Duration) func(int) []string {
	return func(id int) []string {
		a := []string{"-impl", impl, "-dsn", t.dsn, "-name", name,
			"-process", fmt.Sprintf("%s-%d", name, id), "-lease", lease.String()}
		if len(sample) > 0 {
			a = append(a, "-sample", sample[0].String())
		}
		if poll > 0 {
			a = append(a, "-poll", poll.String())
		}
		return a
	}
}

// takeoverFigure runs rounds takeovers of one flag among three processes,
// signalling the holder with sig.
func takeoverFigure(t target, impl, runID, what string, lease, phase time.Duration, sig syscall.Signal, rounds int) ([]time.Duration, error) {
	name := fmt.Sprintf("lbench-%s-%s-%s-%s", runID, what, impl, t.kind)
	g := newGroup("worker", workerArgs(t, impl, name, lease, 0))
	defer g.stopAll()
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	return g.rounds(rounds, 3, sig, phase, 4*lease+10*time.Second, rnd.Float64)
}

func pgVersion(ctx context.Context, dsn string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	var v string
	err = c.QueryRow(ctx, "SHOW server_version").Scan(&v)
	return "PostgreSQL " + v, err
}

func ensurePeerSchema(ctx context.Context, dsn string) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+peerSchema)
	var state interface{ SQLState() string }
	if errors.As(err, &state) && state.SQLState() == "23505" {
		err = nil // created concurrently
	}
	return err
}

// closeOnly runs the stores' benchmarks of a process closing its flags at
// once and writes their section into the report at o.out, replacing its
// section 7 (or adding one), with the date and load of this run.
func closeOnly(targets []target, o options) error {
	old, err := os.ReadFile(o.out)
	if err != nil {
		return fmt.Errorf("-close-only rewrites a section of an existing report: %w", err)
	}
	started, loadStart := time.Now().UTC(), loadavg()
	logf("benchmarks of 64 flags closed at once")
	c := closeManyBenchmarks(targets, o)
	run := fmt.Sprintf("Measured apart from the rest of this report (`go run . -close-only`): %s to %s (UTC), load average at start %s, at end %s, on the test servers of `scripts/test-databases.sh`.",
		started.Format("2006-01-02 15:04:05"), time.Now().UTC().Format("15:04:05"), loadStart, loadavg())
	section := c.section(run)
	if section == "" {
		return fmt.Errorf("-close-only: no benchmark ran (is the go command at hand, and the root module in ..?)")
	}
	if err := os.WriteFile(o.out, []byte(replaceSection(string(old), section)), 0o644); err != nil {
		return err
	}
	fmt.Print(section)
	return nil
}
