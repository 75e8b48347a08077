package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/batchtest"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/postgres"
)

// BenchmarkAcquire measures one attempt, one statement and one round trip:
// a renewal by the holder and a losing attempt by another process (each
// statement also reads the failover guard's two one-row tables).
func BenchmarkAcquire(b *testing.B) {
	dsn := schemaDSN(b, testdb.Postgres(b))
	holder, other := newStore(b, newPool(b, dsn)), newStore(b, newPool(b, dsn))
	ctx := context.Background()
	if err := holder.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	won, err := holder.Acquire(ctx, leadership.Request{Name: "bench", Holder: "a", Lease: time.Hour})
	if err != nil || !won.Acquired {
		b.Fatalf("Acquire = %+v, %v", won, err)
	}
	b.Run("renew", func(b *testing.B) {
		for b.Loop() {
			if res, err := holder.Acquire(ctx, leadership.Request{Name: "bench", Holder: "a", Version: won.Version, Lease: time.Hour}); err != nil || !res.Acquired {
				b.Fatalf("renewal = %+v, %v", res, err)
			}
		}
	})
	b.Run("lose", func(b *testing.B) {
		for b.Loop() {
			if res, err := other.Acquire(ctx, leadership.Request{Name: "bench", Holder: "b", Lease: time.Hour}); err != nil || res.Acquired {
				b.Fatalf("losing attempt = %+v, %v", res, err)
			}
		}
	})
}

// BenchmarkConcurrentRenewals measures what a renewal costs when the
// holders of many flags of one Store renew at once, as they do at their
// shared ticks: 512 renewals sent together, so that they travel in
// batches. "statement=one" is the store as shipped, one statement deciding
// every request of a batch; "statement=per-flag" sends the same batches as
// one statement per request in a pgx batch (one round trip and one commit
// all the same). ns/renewal is the wall time per renewal; with the server
// and the client on one machine, it follows the server's CPU per request.
func BenchmarkConcurrentRenewals(b *testing.B) {
	dsn := schemaDSN(b, testdb.Postgres(b))
	for _, perFlag := range []bool{true, false} {
		b.Run(map[bool]string{true: "statement=per-flag", false: "statement=one"}[perFlag], func(b *testing.B) {
			s := newStore(b, newPool(b, dsn))
			s.SetStatementPerFlag(perFlag)
			benchmarkRenewals(b, s, "flag-"+randomHex())
		})
	}
}

func benchmarkRenewals(b *testing.B, s *postgres.Store, prefix string) {
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	batchtest.BenchmarkRenewals(b, s, prefix, s.BatchStats)
}
