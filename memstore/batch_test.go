package memstore_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/memstore"
)

// TestAcquireBatch checks that a batch is decided at one instant, in
// order, each request seeing the writes of those before it.
func TestAcquireBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		held := acquire(t, s, "b", "x", 0)
		time.Sleep(time.Second / 2)
		res, err := s.AcquireBatch(context.Background(), []leadership.Request{
			{Name: "a", Holder: "p", Lease: time.Second},
			{Name: "a", Holder: "q", Lease: time.Second}, // after p's acquisition: loses
			{Name: "b", Holder: "x", Version: held.Version, Lease: 2 * time.Second},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !res[0].Acquired || res[1].Acquired || res[1].Holder != "p" || !res[2].Acquired || res[2].Version != held.Version {
			t.Fatalf("results %+v", res)
		}
		for _, r := range res {
			if !r.Now.Equal(res[0].Now) {
				t.Fatalf("the batch ran at two instants: %v and %v", res[0].Now, r.Now)
			}
		}
		if want := res[0].Now.Add(2 * time.Second); !res[2].ExpiresAt.Equal(want) {
			t.Fatalf("renewal expires at %v, want %v", res[2].ExpiresAt, want)
		}
	})
}

// TestAcquireBatchFailureRollsBack checks that an error in one statement
// undoes the writes of those before it, in the rows and in Failover's
// history.
func TestAcquireBatchFailureRollsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.WithHistory(time.Minute))
		held := acquire(t, s, "b", "x", 0)
		time.Sleep(2 * time.Second) // x's term expires
		boom := errors.New("boom")
		res, err := s.AcquireBatch(context.Background(), []leadership.Request{
			{Name: "a", Holder: "p", Lease: time.Second},
			{Name: "b", Holder: "p", Lease: time.Second},
			{Name: "c", Holder: "p", Lease: time.Second},
		}, func(i int) error {
			if i == 2 {
				return boom
			}
			return nil
		})
		if !errors.Is(err, boom) || len(res) != 2 || !res[0].Acquired || !res[1].Acquired {
			t.Fatalf("AcquireBatch = %+v, %v; want the two results before the failure and its error", res, err)
		}
		rows, _, _ := s.Flags(context.Background())
		if len(rows) != 1 || rows[0].Name != "b" || rows[0].Holder != "x" || rows[0].Version != held.Version {
			t.Fatalf("rows after the rollback: %+v, want only x's expired term of b", rows)
		}
		time.Sleep(time.Second)
		if err := s.Failover(time.Second/2, 0); err != nil { // loses nothing: the batch left no history
			t.Fatal(err)
		}
		if rows, _, _ := s.Flags(context.Background()); len(rows) != 1 || rows[0].Holder != "x" {
			t.Fatalf("rows after the failover: %+v", rows)
		}
	})
}
