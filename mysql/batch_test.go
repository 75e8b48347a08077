package mysql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/testkit/batchtest"
	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/internal/testkit/tickstest"
	"github.com/dbflag/leadership/mysql"
)

// TestBatchedAttemptsKeepEveryRule sends the attempts of many flags of two
// stores at once, so that they travel in batches (one CALL of
// leadership_acquire_many in routine mode, one transaction in statement
// mode), and checks every rule of the contract per row.
func TestBatchedAttemptsKeepEveryRule(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		dsn := freshDatabase(t, testdb.MySQL(t), nil)
		a, b := newStore(t, openDB(t, dsn), opts...), newStore(t, openDB(t, dsn), opts...)
		if err := a.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		batchtest.CheckRules(t, a, b, "batch", b.BatchStats)
	})
}

// TestGuardRulesHoldForFlagsDecidedInOneBatch walks the failover guard's
// rules with the requests of many flags in one batch, read and written
// once for all of them.
func TestGuardRulesHoldForFlagsDecidedInOneBatch(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		s, db, _ := guarded(t, opts...)
		batchtest.CheckGuardRules(t, s, s.AcquireTogether, func() { newIncarnation(t, db) })
	})
}

// TestOneBatchDecidesNamesThatNeedQuoting sends names and holders that
// need quoting in JSON or SQL through one batch, both ways.
func TestOneBatchDecidesNamesThatNeedQuoting(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		s, _, _ := guarded(t, opts...)
		batchtest.CheckNamesThatNeedQuoting(t, s.AcquireTogether, "")
	})
}

// TestABatchIsOneRoundTrip checks, on a session of its own, that a batch
// of renewals is one statement sent by the client in routine mode, and in
// statement mode one transaction of two guard reads and two statements per
// renewal (START TRANSACTION, the guard, upsert and outcome for each, the
// guard again under a shared lock, COMMIT), and that neither prepares
// anything once the connection has its statements.
func TestABatchIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	const renewals = 30 // within statement mode's batch of 32
	for _, m := range []struct {
		name string
		opts []mysql.Option
		want int64 // statements per batch
	}{{"routine", nil, 1}, {"statement", []mysql.Option{mysql.WithoutRoutines()}, 4 + 2*renewals}} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			db := openDB(t, freshDatabase(t, testdb.MySQL(t), nil))
			db.SetMaxOpenConns(1) // one session: the counters below are the store's
			s := newStore(t, db, m.opts...)
			ctx := context.Background()
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			reqs := make([]leadership.Request, renewals)
			for i := range reqs {
				reqs[i] = leadership.Request{Name: fmt.Sprintf("flag-%02d", i), Holder: "a", Lease: time.Minute}
			}
			renew := func() {
				t.Helper()
				results, err := s.AcquireTogether(ctx, reqs...)
				if err != nil {
					t.Fatal(err)
				}
				for i, res := range results {
					if !res.Acquired {
						t.Fatalf("%s = %+v, want acquired", reqs[i].Name, res)
					}
					reqs[i].Version = res.Version
				}
			}
			renew()
			const batches = 10
			before := sessionStatus(t, db)
			for range batches {
				renew()
			}
			after := sessionStatus(t, db)
			if d := after["Com_stmt_prepare"] - before["Com_stmt_prepare"]; d != 0 {
				t.Errorf("%d batches prepared %d statements, want none", batches, d)
			}
			// Questions also counts the SHOW STATUS that read the second figures.
			if d := after["Questions"] - before["Questions"] - 1; d != m.want*batches {
				t.Errorf("%d batches of %d renewals sent %d statements, want %d each", batches, len(reqs), d, m.want)
			}
		})
	}
}

// TestBatchesWorkWithoutTheBatchProcedure drops leadership_acquire_many,
// as on a database an administrator migrated with an earlier release: a
// batch is then sent one CALL of leadership_acquire per request, with the
// same results.
func TestBatchesWorkWithoutTheBatchProcedure(t *testing.T) {
	t.Parallel()
	s, db, _ := guarded(t)
	if _, err := db.Exec(`DROP PROCEDURE leadership_acquire_many`); err != nil {
		t.Fatal(err)
	}
	batchtest.CheckNamesThatNeedQuoting(t, s.AcquireTogether, "")
}

// TestBatchesWorkWithExecuteOnTheSingleProcedureOnly runs, on a server of
// the test's own, an application user with EXECUTE granted on
// leadership_acquire by name but not on leadership_acquire_many (grants
// made before schema version 12): a batch is then sent one CALL of
// leadership_acquire per request, with the same results.
func TestBatchesWorkWithExecuteOnTheSingleProcedureOnly(t *testing.T) {
	t.Parallel()
	srv := testdb.StartMariaDB(t)
	root := srv.NewDatabase(t, "oneexec")
	if err := newStore(t, openDB(t, root)).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, dsn := srv.NewUser(t, root, "_a",
		"SELECT, INSERT, UPDATE ON %s.leadership_flags",
		"SELECT ON %s.leadership_schema_migrations",
		"SELECT, UPDATE ON %s.leadership_guard",
		"SELECT, INSERT ON %s.leadership_incarnation",
		"EXECUTE ON PROCEDURE %s.leadership_acquire")
	s := newStore(t, openDB(t, dsn))
	if _, err := s.AcquireTogether(context.Background(), leadership.Request{Name: "probe", Holder: "h", Lease: time.Minute},
		leadership.Request{Name: "probe-2", Holder: "h", Lease: time.Minute}); err != nil {
		t.Fatalf("a batch without EXECUTE on leadership_acquire_many: %v", err)
	}
	batchtest.CheckNamesThatNeedQuoting(t, s.AcquireTogether, "")
}

// TestBatchesOfEverySizeReturnEveryResult sends batches around the sizes
// at which leadership_acquire_many appends its chunk of results (every 32
// requests), up to the largest batch: each request gets its own result.
func TestBatchesOfEverySizeReturnEveryResult(t *testing.T) {
	t.Parallel()
	s, _, _ := guarded(t)
	for _, n := range []int{2, 31, 32, 33, 64, 65, 512} {
		reqs := make([]leadership.Request, n)
		for i := range reqs {
			reqs[i] = leadership.Request{Name: fmt.Sprintf("size-%d-%03d", n, i), Holder: fmt.Sprintf("h%d", i), Lease: time.Minute}
		}
		results, err := s.AcquireTogether(context.Background(), reqs...)
		if err != nil {
			t.Fatalf("a batch of %d: %v", n, err)
		}
		for i, res := range results {
			if !res.Acquired || res.Name != reqs[i].Name || res.Holder != reqs[i].Holder || res.Version != 1 {
				t.Fatalf("request %d of a batch of %d = %+v, want %s acquired by %s at version 1", i, n, res, reqs[i].Name, reqs[i].Holder)
			}
		}
	}
}

// TestStatementModeSendsSmallBatches checks the batch sizes the store
// sends and announces to its flags (their renewal groups are half of it):
// 512 in routine mode, one CALL; 32 in statement mode, where a batch is
// one transaction of two round trips per request, so that it stays short.
func TestStatementModeSendsSmallBatches(t *testing.T) {
	t.Parallel()
	db := openDB(t, freshDatabase(t, testdb.MySQL(t), nil))
	if n := newStore(t, db).MaxAcquireBatch(); n != 512 {
		t.Errorf("routine mode batches up to %d requests, want 512", n)
	}
	if n := newStore(t, db, mysql.WithoutRoutines()).MaxAcquireBatch(); n != 32 {
		t.Errorf("statement mode batches up to %d requests, want 32", n)
	}
}

// TestARowAtTheLargestVersionFailsAloneInItsBatch: a row at version
// 2^63−1 can start no new term, and its attempt fails alone (issue 30),
// where its batch (one CALL of leadership_acquire_many, or one transaction
// in statement mode) once failed whole with error 1690, failing every
// other flag in it.
func TestARowAtTheLargestVersionFailsAloneInItsBatch(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		s, db, _ := guarded(t, opts...)
		batchtest.CheckPoisonedNeighbour(t, s, s.AcquireTogether, func(name string, version int64) {
			if _, err := db.Exec(`UPDATE leadership_flags SET version = ? WHERE name = ?`, version, name); err != nil {
				t.Fatal(err)
			}
		}, "")
	})
}

// BenchmarkCloseMany closes every flag of a process at once, as a service
// does at shutdown, and times until each is released and each follower in
// another process has taken over (batchtest.BenchmarkCloseMany), in both
// modes: one flag, and 64 with their releases sent one by one (as before
// they were batched) and in batches (as shipped).
func BenchmarkCloseMany(b *testing.B) {
	for _, m := range modes {
		for _, c := range []struct {
			name     string
			flags    int
			oneByOne bool
		}{{"flags=1", 1, false}, {"flags=64/release=one-by-one", 64, true}, {"flags=64/release=batched", 64, false}} {
			b.Run(m.name+"/"+c.name, func(b *testing.B) {
				dsn := freshDatabase(b, testdb.MySQL(b), nil)
				batchtest.BenchmarkCloseMany(b, c.flags, func() leadership.Store {
					s := newStore(b, openDB(b, dsn), m.opts...)
					if err := s.Migrate(context.Background()); err != nil {
						b.Fatal(err)
					}
					if c.oneByOne {
						s.SetReleaseOneByOne()
					}
					return s
				}, "close")
			})
		}
	}
}

// TestHoldersOfOneStoreRenewInFewBatches checks that the holders of the
// flags of one Store renew at shared ticks, sending their renewals in a
// few batches per renew interval (tickstest), in both modes.
func TestHoldersOfOneStoreRenewInFewBatches(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		s := newStore(t, openDB(t, freshDatabase(t, testdb.MySQL(t), nil)), opts...)
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		tickstest.HoldersRenewInFewBatches(t, s, "tick", s.BatchStats)
	})
}

// TestReleasesSentTogetherKeepEveryRule sends releases as one transaction
// and checks each by the rules of a release alone (batchtest), in both
// modes.
func TestReleasesSentTogetherKeepEveryRule(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		dsn := freshDatabase(t, testdb.MySQL(t), nil)
		s, other := newStore(t, openDB(t, dsn), opts...), newStore(t, openDB(t, dsn), opts...)
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		batchtest.CheckReleaseRules(t, s, other, s.ReleaseTogether, "")
	})
}

// TestClosingManyFlagsAtOnceReleasesThemTogether closes the 64 flags of a
// process at once: their releases travel in a few transactions, and each
// follower in another process is woken by the holder's bell (batchtest),
// in both modes.
func TestClosingManyFlagsAtOnceReleasesThemTogether(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		dsn := freshDatabase(t, testdb.MySQL(t), nil)
		a, b := newStore(t, openDB(t, dsn), opts...), newStore(t, openDB(t, dsn), opts...)
		if err := a.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		batchtest.CheckCloseMany(t, a, b, "close", a.ReleaseStats)
	})
}
