package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	peer "github.com/openshift-online/ocm-sdk-go/leadership"
	"github.com/openshift-online/ocm-sdk-go/logging"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/postgres"
)

// counter is a pgx QueryTracer that counts the statements a process sends
// (every Query, QueryRow and Exec through pgx, on any connection of the
// process) and their latency. It does not see the protocol-level pings
// pgxpool and pgx's database/sql adapter send on idle connections.
type counter struct {
	n   atomic.Int64
	mu  sync.Mutex
	lat []time.Duration // only when keepLatency
	on  atomic.Bool
}

type startKey struct{}

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	if c.on.Load() {
		return context.WithValue(ctx, startKey{}, time.Now())
	}
	return ctx
}

func (c *counter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if !c.on.Load() {
		return
	}
	if t, ok := ctx.Value(startKey{}).(time.Time); ok {
		d := time.Since(t)
		c.mu.Lock()
		c.lat = append(c.lat, d)
		c.mu.Unlock()
	}
}

// The batch hooks count each statement of a pgx batch (the postgres store
// sends the attempts of concurrent flags in one) as a statement, and the
// batch's round trip as one latency sample.
func (c *counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	if c.on.Load() {
		return context.WithValue(ctx, startKey{}, time.Now())
	}
	return ctx
}

func (c *counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) { c.n.Add(1) }

func (c *counter) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
	c.TraceQueryEnd(ctx, conn, pgx.TraceQueryEndData{})
}

func (c *counter) takeLatencies() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.lat
	c.lat = nil
	return l
}

// out serialises lines on stdout, the protocol between worker and
// coordinator.
var outMu sync.Mutex
var out = bufio.NewWriter(os.Stdout)

func emit(format string, args ...any) {
	outMu.Lock()
	fmt.Fprintf(out, format+"\n", args...)
	out.Flush()
	outMu.Unlock()
}

// withParam adds a query parameter to a URL-form DSN.
func withParam(dsn, kv string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}

// ourStore opens a store for our flag; on Postgres the pool carries the
// statement counter and an application_name.
func ourStore(ctx context.Context, dsn, app string, c *counter) (leadership.Store, func(), error) {
	if kind, _ := storeopen.Kind(dsn); kind == storeopen.Postgres {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, nil, err
		}
		cfg.ConnConfig.Tracer = c
		cfg.ConnConfig.RuntimeParams["application_name"] = app
		cfg.ShouldPing = postgres.ShouldPing // as the postgres package recommends: one round trip per attempt
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		s, err := postgres.New(pool)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return s, pool.Close, nil
	}
	o, err := storeopen.Open(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	return o.Store, o.Close, nil
}

// attempts sums the attempt histogram counts and the error counters of our
// flags registered on reg.
func attempts(reg *prometheus.Registry) (n, errs int64) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "leadership_flag_attempt_duration_seconds":
				n += int64(m.GetHistogram().GetSampleCount())
			case "leadership_flag_errors_total":
				errs += int64(m.GetCounter().GetValue())
			}
		}
	}
	return n, errs
}

// attemptBuckets sums, over the flags registered on reg, the cumulative
// counts of the attempt histogram by upper bound (seconds).
func attemptBuckets(reg *prometheus.Registry) map[float64]uint64 {
	out := map[float64]uint64{}
	mfs, err := reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != "leadership_flag_attempt_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				out[b.GetUpperBound()] += b.GetCumulativeCount()
			}
			out[math.Inf(1)] += m.GetHistogram().GetSampleCount()
		}
	}
	return out
}

// attemptQuantiles reads the attempts between two attemptBuckets
// snapshots: the upper bounds of the buckets holding the median, the 99th
// percentile and the slowest attempt (+Inf beyond the last bucket). The
// attempt is the flag's whole call to the store, its wait in a batch's
// queue included.
func attemptQuantiles(b0, b1 map[float64]uint64) (p50, p99, pmax time.Duration) {
	bounds := slices.Sorted(maps.Keys(b1))
	total := b1[math.Inf(1)] - b0[math.Inf(1)]
	if total == 0 {
		return
	}
	at := func(le float64) time.Duration {
		if math.IsInf(le, 1) {
			return time.Duration(math.MaxInt64)
		}
		return time.Duration(le * float64(time.Second))
	}
	set50, set99 := false, false
	for _, le := range bounds {
		c := b1[le] - b0[le]
		if !set50 && c*2 >= total {
			p50, set50 = at(le), true
		}
		if !set99 && c*100 >= total*99 {
			p99, set99 = at(le), true
		}
		if c == total {
			return p50, p99, at(le)
		}
	}
	return p50, p99, at(math.Inf(1))
}

// workerMain runs one process holding or following one flag. It prints
// "READY", then "R <unixnano>" / "L <unixnano>" whenever Raised() changes
// (sampled every -sample), "G <unixnano> <gap> <raised>" after a gap of
// more than 50 ms between samples (SIGSTOP), "S <unixnano> <statements> <attempts> <raised>"
// every second, and on SIGTERM closes the flag and its store, prints
// "K <signal seen> <Close returned> <store closed>" and "C <unixnano>" (all
// unixnano) and exits.
func workerMain(args []string) {
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	impl := fs.String("impl", "ours", "ours or peer")
	dsn := fs.String("dsn", "", "database")
	name := fs.String("name", "", "flag name")
	proc := fs.String("process", "", "process name")
	lease := fs.Duration("lease", leadership.DefaultLease, "our lease, or the peer's Interval")
	poll := fs.Duration("poll", 0, "our PollInterval (0: default)")
	sample := fs.Duration("sample", 200*time.Microsecond, "how often Raised() is sampled")
	fs.Parse(args)

	ctx := context.Background()
	c := &counter{}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)

	var raised func() bool
	var closeFlag func() (closed time.Time) // when the flag's Close returned
	var attemptsFn func() int64 = func() int64 { return -1 }
	switch *impl {
	case "ours":
		store, closeStore, err := ourStore(ctx, *dsn, "lbench-"+*proc, c)
		if err != nil {
			fatal(err)
		}
		reg := prometheus.NewRegistry()
		b := leadership.NewFlag().Store(store).Name(*name).Process(*proc).Lease(*lease).MetricsRegisterer(reg)
		if *poll > 0 {
			b = b.PollInterval(*poll)
		}
		f, err := b.Build(ctx)
		if err != nil {
			fatal(err)
		}
		raised = f.Raised
		closeFlag = func() time.Time { f.Close(); t := time.Now(); closeStore(); return t }
		attemptsFn = func() int64 { n, _ := attempts(reg); return n }
	case "peer":
		cfg, err := pgx.ParseConfig(withParam(*dsn, "search_path="+peerSchema))
		if err != nil {
			fatal(err)
		}
		cfg.Tracer = c
		cfg.RuntimeParams["application_name"] = "lbench-" + *proc
		db := stdlib.OpenDB(*cfg)
		logger, err := logging.NewGoLoggerBuilder().Debug(false).Info(false).Warn(false).Error(false).Build()
		if err != nil {
			fatal(err)
		}
		f, err := peer.NewFlag().Logger(logger).Handle(db).Name(*name).Process(*proc).Interval(*lease).Build(ctx)
		if err != nil {
			fatal(err)
		}
		raised = f.Raised
		closeFlag = func() time.Time { f.Close(); t := time.Now(); db.Close(); return t }
	default:
		fatal(fmt.Errorf("unknown -impl %q", *impl))
	}
	emit("READY")

	tick := time.NewTicker(*sample)
	stats := time.NewTicker(time.Second)
	was := false
	var lastTick time.Time
	for {
		select {
		case <-term:
			t0 := time.Now()
			closed := closeFlag()
			t1 := time.Now()
			emit("K %d %d %d", t0.UnixNano(), closed.UnixNano(), t1.UnixNano())
			emit("C %d", t1.UnixNano())
			os.Exit(0)
		case <-stats.C:
			r := 0
			if was {
				r = 1
			}
			emit("S %d %d %d %d", time.Now().UnixNano(), c.n.Load(), attemptsFn(), r)
		case <-tick.C:
			t := time.Now()
			now := raised()
			if !lastTick.IsZero() && t.Sub(lastTick) > 50*time.Millisecond {
				// The process was stopped (or starved): say what the first
				// call after the gap returned.
				emit("G %d %d %t", t.UnixNano(), t.Sub(lastTick), now)
			}
			lastTick = t
			if now != was {
				was = now
				if now {
					emit("R %d", time.Now().UnixNano())
				} else {
					emit("L %d", time.Now().UnixNano())
				}
			}
		}
	}
}

// scaleWorkerMain builds many flags of our implementation in one process
// on one Postgres pool, prints READY, waits for SIGUSR1, waits -warm, then
// measures for -measure and prints "M0 <unixnano>" at the start,
// "M1 <unixnano>" at the end and one RESULT line; it closes its flags and
// exits on SIGTERM.
func scaleWorkerMain(args []string) {
	fs := flag.NewFlagSet("scale-worker", flag.ExitOnError)
	dsn := fs.String("dsn", "", "postgres DSN")
	prefix := fs.String("prefix", "", "flag name prefix")
	proc := fs.String("process", "", "process name")
	n := fs.Int("flags", 100, "flags in this process")
	warm := fs.Duration("warm", 20*time.Second, "wait before measuring")
	measure := fs.Duration("measure", 30*time.Second, "measurement window")
	fs.Parse(args)

	ctx := context.Background()
	c := &counter{}
	store, closeStore, err := ourStore(ctx, *dsn, "lbench-scale-"+*proc, c)
	if err != nil {
		fatal(err)
	}
	defer closeStore()
	if err := store.Migrate(ctx); err != nil {
		fatal(err)
	}
	reg := prometheus.NewRegistry()
	var lowers atomic.Int64
	flags := make([]*leadership.Flag, *n)
	var wg sync.WaitGroup
	var buildErr atomic.Value
	sem := make(chan struct{}, 8)
	for i := range flags {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f, err := leadership.NewFlag().Store(store).Name(fmt.Sprintf("%s-%d", *prefix, i)).
				Process(*proc).Migrate(false).MetricsRegisterer(reg).
				OnLower(func() { lowers.Add(1) }).Build(ctx)
			if err != nil {
				buildErr.Store(err)
				return
			}
			flags[i] = f
		}()
	}
	wg.Wait()
	if err, ok := buildErr.Load().(error); ok {
		fatal(err)
	}
	// The coordinator starts every process's warm-up at once (SIGUSR1)
	// and lets them close their flags only after all have measured
	// (SIGTERM), so no process's window sees another's release.
	start := make(chan os.Signal, 1)
	signal.Notify(start, syscall.SIGUSR1)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	emit("READY")
	<-start
	time.Sleep(*warm)

	count := func() int {
		k := 0
		for _, f := range flags {
			if f.Raised() {
				k++
			}
		}
		return k
	}
	var ru0, ru1 syscall.Rusage
	a0, e0 := attempts(reg)
	s0, l0 := c.n.Load(), lowers.Load()
	r0 := count()
	h0 := attemptBuckets(reg)
	c.takeLatencies()
	c.on.Store(true)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	t0 := time.Now()
	emit("M0 %d", t0.UnixNano())
	time.Sleep(*measure)
	t1 := time.Now()
	emit("M1 %d", t1.UnixNano())
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	a1, e1 := attempts(reg)
	s1, l1 := c.n.Load(), lowers.Load()
	r1 := count()
	lat := c.takeLatencies()
	p50, p99, pmax := percentiles(lat)
	a50, a99, amax := attemptQuantiles(h0, attemptBuckets(reg))
	cpu := tv(ru1.Utime) + tv(ru1.Stime) - tv(ru0.Utime) - tv(ru0.Stime)
	emit("RESULT %d %d %d %d %d %d %d %d %d %d %.3f %d %d %d %d", *n, a1-a0, s1-s0, e1-e0, l1-l0, r0, r1,
		p50.Microseconds(), p99.Microseconds(), pmax.Microseconds(), cpu/t1.Sub(t0).Seconds(),
		len(lat), a50.Microseconds(), a99.Microseconds(), amax.Microseconds())
	<-term
	for _, f := range flags {
		f.Close()
	}
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// percentiles of latencies: median, 99th, max.
func percentiles(l []time.Duration) (p50, p99, pmax time.Duration) {
	if len(l) == 0 {
		return
	}
	s := slices.Sorted(slices.Values(l))
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)], s[len(s)-1]
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench worker:", err)
	os.Exit(2)
}
