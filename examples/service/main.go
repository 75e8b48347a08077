// Command service is a small service to copy: it runs a leader-only job
// every two seconds with gocron, serves Prometheus metrics on /metrics, a
// liveness probe on /healthz and a leader-only readiness probe on /leader.
// Start it several times against one database and only one instance runs
// the job.
//
// The job's schedule is a cron expression with seconds, "*/2 * * * * *":
// every replica's ticks fall at the same instants of the wall clock, so a
// replica that takes over runs the next tick, not a tick of its own two
// seconds after its own start (gocron.DurationJob counts from each
// replica's start, and a handover could then run the job twice within one
// period). At shutdown it stops the scheduler, then closes the flag (which
// hands over at once), then the pool.
//
//	go run ./examples/service -addr :8081 &
//	go run ./examples/service -addr :8082 &
//	curl localhost:8081/leader localhost:8082/leader
//
// The database is SQLite (file service.db) by default; -dsn also takes
// postgres:// and mysql:// DSNs. It is opened with this module's
// internal/storeopen: a copy outside the module opens its store directly,
// for example with sqlite.Open and sqlite.New, or postgres.Open and
// postgres.New.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/gocronflag"
	"github.com/dbflag/leadership/healthz"
	"github.com/dbflag/leadership/internal/storeopen"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "HTTP address for /metrics, /healthz and /leader")
	dsn := flag.String("dsn", "sqlite:service.db", "database: "+storeopen.Usage)
	schedule := flag.String("schedule", "*/2 * * * * *", "when the leader runs the job: a cron expression with seconds, aligned to the wall clock")
	lease := flag.Duration("lease", 10*time.Second, "leadership lease")
	name := flag.String("name", "example-service-job", "name of the leadership flag")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*addr, *dsn, *name, *schedule, *lease, logger); err != nil {
		logger.Error("service failed", "error", err)
		os.Exit(1)
	}
}

func run(addr, dsn, name, schedule string, lease time.Duration, logger *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	store, err := storeopen.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer store.Close() // third: the pool, once the flag has released its row

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	// ctx ends at SIGTERM, but it bounds Build only: the flag runs until
	// Close, after the scheduler has stopped.
	f, err := leadership.NewFlag().
		Store(store.Store).
		Name(name).
		Lease(lease).
		Logger(logger).
		MetricsRegisterer(reg).
		Build(ctx)
	if err != nil {
		return err
	}
	defer f.Close() // second: lower and release, so another replica takes over at once

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(gocronflag.Elector(f)))
	if err != nil {
		return err
	}
	_, err = s.NewJob(gocron.CronJob(schedule, true), gocron.NewTask(func() {
		token, _ := f.Token()
		logger.Info("leader-only job ran", "token", token)
	}))
	if err != nil {
		return err
	}
	s.Start()
	defer func() { _ = s.Shutdown() }() // first: no new run starts, and the running one ends

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", healthz.Liveness(f))
	mux.Handle("/leader", healthz.LeaderOnly(f))
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errs := make(chan error, 1)
	go func() { errs <- srv.ListenAndServe() }()
	logger.Info("serving", "addr", addr, "process", f.Process())

	select {
	case <-ctx.Done():
	case err := <-errs:
		return fmt.Errorf("http: %w", err)
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
