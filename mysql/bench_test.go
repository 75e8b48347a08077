package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testdb"
)

// BenchmarkAcquire measures one attempt (one CALL, one round trip): a
// renewal by the holder and a losing attempt by another process, with
// autocommit on (the default) and off in the DSN.
func BenchmarkAcquire(b *testing.B) {
	for _, v := range []struct {
		name   string
		params map[string]string
	}{{"autocommit=1", nil}, {"autocommit=0", autocommitOff}} {
		b.Run(v.name, func(b *testing.B) {
			dsn := freshDatabase(b, testdb.MySQL(b), v.params)
			holder, other := newStore(b, openDB(b, dsn)), newStore(b, openDB(b, dsn))
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
		})
	}
}
