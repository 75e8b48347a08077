package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testdb"
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
