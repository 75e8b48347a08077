package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/storetest"
)

// TestSessionInsideTransaction covers a pool whose sessions start inside a
// transaction (here an AfterConnect hook that runs BEGIN). The store's
// statement would stay uncommitted and be rolled back when pgxpool destroys
// the connection, after the caller trusted the term: before the store
// checked the session's status, a then acquired version 1, and b got
// version 1 too.
func TestSessionInsideTransaction(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	ctx := context.Background()
	b := newStore(t, newPool(t, dsn))
	if err := b.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "BEGIN")
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	a := newStore(t, pool)
	res, err := a.Acquire(ctx, leadership.Request{Name: "f", Holder: "a", Lease: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "inside a transaction") {
		t.Errorf("Acquire in a session inside a transaction = %+v, %v; want an error saying so", res, err)
	}
	// Whatever a was told, b must not get a term a may trust.
	got, err := b.Acquire(ctx, leadership.Request{Name: "f", Holder: "b", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired && got.Acquired {
		t.Fatalf("a trusted version %d and b acquired version %d: two trusted terms", res.Version, got.Version)
	}
	if ok, err := a.Release(ctx, "f", "b", got.Version); err == nil || ok {
		t.Errorf("Release in a session inside a transaction = %v, %v; want an error", ok, err)
	}
	if ok, err := a.Evict(ctx, "f"); err == nil || ok {
		t.Errorf("Evict in a session inside a transaction = %v, %v; want an error", ok, err)
	}
	if rec, _, err := b.Flags(ctx); err != nil || len(rec) != 1 || rec[0].Holder != "b" {
		t.Fatalf("after a's attempts the flag is %+v, %v; want b's, untouched", rec, err)
	}
}

// TestReadOnlySessionNamesTheFix checks the error of a store whose sessions
// are read-only (default_transaction_read_only=on, as on a standby).
func TestReadOnlySessionNamesTheFix(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	ro := withParam(t, dsn, "default_transaction_read_only", "on")
	ctx := context.Background()
	_, err := leadership.NewFlag().Store(newStore(t, newPool(t, ro))).Name("f").Build(ctx)
	if err == nil || !strings.Contains(err.Error(), "default_transaction_read_only") {
		t.Errorf("Build on a fresh schema with read-only sessions = %v, want an error naming default_transaction_read_only", err)
	}
	if err := newStore(t, newPool(t, dsn)).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = newStore(t, newPool(t, ro)).Acquire(ctx, leadership.Request{Name: "f", Holder: "a", Lease: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "default_transaction_read_only") || errors.Is(err, leadership.ErrInvalidArgument) {
		t.Errorf("Acquire with read-only sessions = %v, want an error naming default_transaction_read_only", err)
	}
}

// TestConformanceUnusualSessionDefaults runs the store contract with
// session defaults an application's role may carry: every transaction
// SERIALIZABLE, and idle transactions cut after 100 ms. Statements of the
// store are single-statement transactions (serialization failures are
// retried once), Flags's too (TestFlagsLeavesNoTransactionIdle). The flag
// behaviours send no statement of their own, so the contract suffices.
func TestConformanceUnusualSessionDefaults(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	dsn = withParam(t, dsn, "default_transaction_isolation", "serializable")
	dsn = withParam(t, dsn, "idle_in_transaction_session_timeout", "100")
	storetest.RunContract(t, func(t testing.TB) leadership.Store { return newStore(t, newPool(t, dsn)) })
}
