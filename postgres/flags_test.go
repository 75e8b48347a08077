package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/postgres"
)

// slowClient is a pgx tracer that holds each statement back before pgx
// sends it, as a loaded machine does when it schedules the client late.
type slowClient struct{ d time.Duration }

func (s slowClient) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	time.Sleep(s.d)
	return ctx
}

func (slowClient) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestFlagsLeavesNoTransactionIdle lists the flags from a client that is
// slow between statements, on a session whose idle transactions are cut
// after 100 ms (idle_in_transaction_session_timeout): Flags reads the
// clock and the rows in one statement, so no transaction of its waits on
// the client. (Its earlier BEGIN, clock, rows and ROLLBACK failed so on a
// loaded 2-core machine in TestConformanceUnusualSessionDefaults.)
func TestFlagsLeavesNoTransactionIdle(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	ctx := context.Background()
	s := newStore(t, newPool(t, dsn))
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	name := "slow-" + randomHex()
	if res, err := s.Acquire(ctx, leadership.Request{Name: name, Holder: "a", Lease: time.Minute}); err != nil || !res.Acquired {
		t.Fatalf("acquire = %+v, %v", res, err)
	}

	cfg, err := pgxpool.ParseConfig(withParam(t, dsn, "idle_in_transaction_session_timeout", "100"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = slowClient{200 * time.Millisecond}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	slow, err := postgres.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	recs, now, err := slow.Flags(ctx)
	if err != nil {
		t.Fatalf("Flags from a client 200 ms slow between statements, idle transactions cut after 100 ms: %v", err)
	}
	if len(recs) != 1 || recs[0].Name != name || recs[0].Holder != "a" || now.IsZero() || !recs[0].ExpiresAt.After(now) {
		t.Fatalf("Flags = %+v at %v, want the one flag %s held by a", recs, now, name)
	}
	// An empty table still reads the clock.
	if _, err := pool.Exec(ctx, `DELETE FROM leadership_flags`); err != nil {
		t.Fatal(err)
	}
	if recs, now, err := slow.Flags(ctx); err != nil || len(recs) != 0 || now.IsZero() {
		t.Fatalf("Flags of an empty table = %+v, %v, %v; want none, the clock, no error", recs, now, err)
	}
}

// TestARowWithANullIsUnreadable lists the flags of a table whose NOT NULL
// constraints were dropped by hand, with a NULL written in a different
// column of each of four rows: Flags returns every row, those four with
// their names only, and names each in an error, a
// sqlstore.UnreadableRows, instead of panicking (as it did on a NULL
// holder or version) or reading a NULL time as the zero time.
func TestARowWithANullIsUnreadable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, schemaDSN(t, testdb.Postgres(t)))
	s := newStore(t, pool)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	columns := []string{"holder", "version", "renewed_at", "expires_at"}
	for _, name := range append([]string{"good"}, columns...) {
		if res, err := s.Acquire(ctx, leadership.Request{Name: name, Holder: "a", Lease: time.Minute}); err != nil || !res.Acquired {
			t.Fatalf("acquire %s = %+v, %v", name, res, err)
		}
	}
	for _, c := range columns {
		for _, q := range []string{
			`ALTER TABLE leadership_flags ALTER ` + c + ` DROP NOT NULL`,
			`UPDATE leadership_flags SET ` + c + ` = NULL WHERE name = '` + c + `'`,
		} {
			if _, err := pool.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	recs, _, err := s.Flags(ctx)
	testdb.CheckUnreadable(t, recs, err, "good", columns)
}
