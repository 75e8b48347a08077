package batchtest

import (
	"context"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// CheckNamesThatNeedQuoting acquires, renews, then tries with another
// holder, flags whose names and holders need quoting in an array literal,
// in JSON or in SQL (quotes, backslashes, braces, commas, spaces, NULL,
// line and paragraph separators, characters beyond the BMP), each time
// all in one batch sent by send: every renewal must find its own held
// version by name, and every result must name its holder exactly. Names
// start with prefix.
func CheckNamesThatNeedQuoting(t testing.TB, send func(context.Context, ...leadership.Request) ([]leadership.Result, error), prefix string) {
	t.Helper()
	ctx := context.Background()
	var reqs []leadership.Request
	for _, n := range []string{`quote"d`, `back\slash`, `{braces}`, `a,b`, `with space`, `NULL`, `it's`, "line\u2028para\u2029", "emoji 🚩", `\"`, `"`} {
		reqs = append(reqs, leadership.Request{Name: prefix + n, Holder: "h" + n, Lease: time.Minute})
	}
	first, err := send(ctx, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range first {
		if !res.Acquired || res.Name != reqs[i].Name || res.Holder != reqs[i].Holder {
			t.Fatalf("first acquisition of %q = %+v, want acquired", reqs[i].Name, res)
		}
		reqs[i].Version = res.Version
	}
	renewed, err := send(ctx, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range renewed {
		if !res.Acquired || res.Version != reqs[i].Version || res.Holder != reqs[i].Holder {
			t.Errorf("renewal of %q in one batch = %+v, want its term %d renewed", reqs[i].Name, res, reqs[i].Version)
		}
	}
	others := make([]leadership.Request, len(reqs))
	for i, r := range reqs {
		others[i] = leadership.Request{Name: r.Name, Holder: "other", Lease: time.Minute}
	}
	lost, err := send(ctx, others...)
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range lost {
		if res.Acquired || res.Version != reqs[i].Version || res.Holder != reqs[i].Holder {
			t.Errorf("attempt of another holder on %q in one batch = %+v, want lost to %q at version %d", reqs[i].Name, res, reqs[i].Holder, reqs[i].Version)
		}
	}
}
