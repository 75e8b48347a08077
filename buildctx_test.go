package leadership_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/memstore"
)

// TestTheBuildContextDoesNotBoundTheFlag: the context given to Build
// bounds the migrations and the first attempt only. A service that builds
// its flag with a context cancelled at shutdown (signal.NotifyContext)
// keeps leading, renewing and handing over by Close, in the order its
// shutdown chooses.
func TestTheBuildContextDoesNotBoundTheFlag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		ctx, cancel := context.WithCancel(context.Background())
		f, err := leadership.NewFlag().Store(s).Name("job").Process("a").Lease(testLease).Jitter(0).Build(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cancel()
		follower := build(t, s, "b")
		time.Sleep(5 * testLease) // many renewals after the cancel
		if !f.Raised() || follower.Raised() {
			t.Fatalf("five leases after Build's context was cancelled: leader raised %v, follower raised %v; want the leader still leading", f.Raised(), follower.Raised())
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if !follower.Raised() {
			t.Fatal("the follower did not take over after Close")
		}
	})
}
