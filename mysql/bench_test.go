package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/batchtest"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/mysql"
)

// BenchmarkAcquire measures one attempt: a renewal by the holder and a
// losing attempt by another process, in routine mode (one CALL, one round
// trip) and statement mode (a transaction of six statements), with
// autocommit on (the default) and off in the DSN.
func BenchmarkAcquire(b *testing.B) {
	for _, m := range modes {
		for _, v := range []struct {
			name   string
			params map[string]string
		}{{"autocommit=1", nil}, {"autocommit=0", autocommitOff}} {
			b.Run(m.name+"/"+v.name, func(b *testing.B) { benchmarkAcquire(b, v.params, m.opts...) })
		}
	}
}

func benchmarkAcquire(b *testing.B, params map[string]string, opts ...mysql.Option) {
	dsn := freshDatabase(b, testdb.MySQL(b), params)
	holder, other := newStore(b, openDB(b, dsn), opts...), newStore(b, openDB(b, dsn), opts...)
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
// batches. "batch=one-call" is routine mode as shipped, one CALL of
// leadership_acquire_many per batch; "batch=call-per-flag" sends the same
// batches as one CALL of leadership_acquire per request, as before it;
// "batch=statements" is statement mode, one transaction per batch.
// ns/renewal is the wall time per renewal; with the server and the client
// on one machine, it follows the server's CPU per request.
func BenchmarkConcurrentRenewals(b *testing.B) {
	for _, v := range []struct {
		name    string
		perFlag bool
		opts    []mysql.Option
	}{
		{"batch=call-per-flag", true, nil},
		{"batch=one-call", false, nil},
		{"batch=statements", false, []mysql.Option{mysql.WithoutRoutines()}},
	} {
		b.Run(v.name, func(b *testing.B) {
			s := newStore(b, openDB(b, freshDatabase(b, testdb.MySQL(b), nil)), v.opts...)
			s.SetCallPerFlag(v.perFlag)
			if err := s.Migrate(context.Background()); err != nil {
				b.Fatal(err)
			}
			batchtest.BenchmarkRenewals(b, s, "flag", s.BatchStats)
		})
	}
}
