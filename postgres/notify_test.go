package postgres_test

import (
	"context"
	"encoding/json"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/postgres"
)

// countingStore counts the attempts made on a store.
type countingStore struct {
	*postgres.Store
	attempts atomic.Int64
}

func (s *countingStore) Acquire(ctx context.Context, req leadership.Request) (leadership.Result, error) {
	s.attempts.Add(1)
	return s.Store.Acquire(ctx, req)
}

// TestAFloodOfNotifiesCostsAFollowerABoundedNumberOfAttempts has a role
// with no privilege on the store's tables (lead_noddl: any role that can
// connect may NOTIFY) send 200 notifications naming a follower's flag,
// one every 10 ms, while the row stays held: each would have woken the
// follower for an attempt; coalesced, they bring at most one attempt per
// Lease/20.
func TestAFloodOfNotifiesCostsAFollowerABoundedNumberOfAttempts(t *testing.T) {
	t.Parallel()
	dsn := schemaDSN(t, testdb.Postgres(t))
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	u.User = url.UserPassword("lead_noddl", "lead")
	spoofer, err := pgxpool.New(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer spoofer.Close()
	if err := spoofer.Ping(context.Background()); err != nil {
		testdb.Unavailable(t, "role lead_noddl", testdb.EnvPostgres, err.Error())
	}

	const lease = 6 * time.Second // default poll interval: Lease, with notifications
	build := func(s leadership.Store, process string) *leadership.Flag {
		t.Helper()
		f, err := leadership.NewFlag().Store(s).Name("flooded").Process(process).Lease(lease).Build(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	leader := build(newStore(t, newPool(t, dsn)), "a")
	follower := &countingStore{Store: newStore(t, newPool(t, dsn))}
	if build(follower, "b").Raised() || !leader.Raised() {
		t.Fatal("a should lead, b follow")
	}
	for deadline := time.Now().Add(10 * time.Second); !follower.NotifiesOtherProcesses(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the follower's store reports no notifications 10 s after Build")
		}
	}
	payload, _ := json.Marshal(map[string]string{"schema": schema, "name": "flooded"})
	before, began := follower.attempts.Load(), time.Now()
	for range 200 {
		if _, err := spoofer.Exec(context.Background(), `SELECT pg_notify($1, $2)`, postgres.Channel, string(payload)); err != nil {
			t.Fatalf("NOTIFY as lead_noddl: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	flood := time.Since(began)
	extra := follower.attempts.Load() - before
	// One per Lease/20 of the flood and the first, and the follower's own
	// attempt at the holder's expiry.
	limit := int64(flood/(lease/20)) + 3
	t.Logf("200 notifications in %v brought %d attempts (at most %d)", flood, extra, limit)
	if extra > limit {
		t.Errorf("200 notifications in %v brought %d attempts, want at most %d: one per %v", flood, extra, limit, lease/20)
	}
	if !leader.Raised() {
		t.Error("the leader lowered during the flood")
	}
}
