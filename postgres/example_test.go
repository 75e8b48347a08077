package postgres_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/postgres"
)

// A flag on PostgreSQL: a pool whose ShouldPing keeps each attempt at one
// round trip, a store on it, and a flag. It needs a server, so it only
// compiles here.
func ExampleNew() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig("postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	cfg.ShouldPing = postgres.ShouldPing // pgxpool's default pings a connection idle for over a second first
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
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
