package healthz_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/healthz"
	"github.com/dbflag/leadership/internal/testkit/faultstore"
	"github.com/dbflag/leadership/memstore"
)

func get(h http.Handler) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	return rec.Code, rec.Body.String()
}

func TestLivenessAndLeaderOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		cut := faultstore.Wrap(s)
		leader, err := leadership.NewFlag().Store(cut).Name("job").Process("a").Build(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer leader.Close()
		follower, err := leadership.NewFlag().Store(s).Name("job").Process("b").Build(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer follower.Close()

		if code, body := get(healthz.Liveness(leader, follower)); code != 200 || body != "ok\n" {
			t.Fatalf("liveness = %d %q", code, body)
		}
		if code, body := get(healthz.LeaderOnly(leader)); code != 200 || body != "leader\n" {
			t.Fatalf("leader readiness = %d %q", code, body)
		}
		if code, body := get(healthz.LeaderOnly(follower)); code != 503 || !strings.Contains(body, `"a"`) {
			t.Fatalf("follower readiness = %d %q, want 503 naming holder a", code, body)
		}
		cut.Fail(errors.New("database down"))
		time.Sleep(leadership.DefaultLease) // past the leader's trust window
		code, body := get(healthz.Liveness(leader, follower))
		if code != 503 || !strings.Contains(body, "renewal overdue") {
			t.Fatalf("liveness of a leader that cannot renew = %d %q, want 503 renewal overdue", code, body)
		}
		c := healthz.Checker{Flag: leader}
		if c.Name() != "leadership-job" || !errors.Is(c.Check(nil), leadership.ErrRenewalOverdue) {
			t.Fatalf("Checker = %q, %v", c.Name(), c.Check(nil))
		}
		if err := (healthz.Checker{Flag: follower}).Check(nil); err != nil {
			t.Fatalf("the follower (which took over) is unhealthy: %v", err)
		}
	})
}
