package postgres_test

import (
	"context"
	"errors"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/postgres"
)

// A flag on PostgreSQL: a pool of Open, whose ShouldPing keeps each attempt
// at one round trip, a store on it, and a flag. It needs a server, so it
// only compiles here.
func ExampleOpen() {
	ctx := context.Background()
	pool, err := postgres.Open(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close() // after the flags that use it

	store, err := postgres.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	flag, err := leadership.NewFlag().Store(store).Name("nightly-report").Build(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer flag.Close()

	if flag.Raised() {
		log.Print("leading: run the nightly report")
	}
}

// A pool of your own, for settings a DSN cannot carry (hooks, a tracer):
// give it ShouldPing, or each attempt after a second idle costs a ping
// first (New says so at Info on the store's logger).
func ExampleNew() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig("postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	cfg.ShouldPing = postgres.ShouldPing
	// … your settings: cfg.AfterConnect, cfg.ConnConfig.Tracer, …
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store, err := postgres.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	_ = store // build flags on it as in the example of Open
}

// A leader's writes to the flag's own database, in a fenced transaction: it
// commits only within this process's term, and the next term starts only
// after it. It needs a server, so it only compiles here.
func ExampleRunFenced() {
	ctx := context.Background()
	pool, err := postgres.Open(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := postgres.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	flag, err := leadership.NewFlag().Store(store).Name("nightly-report").Build(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer flag.Close()

	report := func(day string, total int) {
		err := postgres.RunFenced(ctx, pool, flag, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO report (day, total) VALUES ($1, $2)`, day, total)
			return err
		})
		if errors.Is(err, leadership.ErrNotLeader) {
			log.Print("our term is over: nothing was written; another process leads")
		}
	}
	report("2026-11-26", 42)
}
