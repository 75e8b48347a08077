// Package healthz serves the state of leadership flags to health probes:
// a liveness check that fails when a flag's renewals are overdue or its
// loop is stalled ([leadership.Flag.Check]), and a readiness check that
// passes only on the leader, for routing traffic to it.
//
//	mux.Handle("/healthz", healthz.Liveness(flag))
//	mux.Handle("/leader", healthz.LeaderOnly(flag))
//
// [Checker] fits routers that take named checks, in the shape of
// client-go's leader-election HealthzAdaptor (Name and Check).
package healthz

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/dbflag/leadership"
)

// Liveness returns a handler that answers 200 "ok" when every flag's Check
// passes, and 503 with one line per failing flag otherwise. A follower
// that cannot reach the database is alive: it is not leading.
func Liveness(flags ...*leadership.Flag) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var failed []string
		for _, f := range flags {
			if err := f.Check(); err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", f.Name(), err))
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if len(failed) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, strings.Join(failed, "\n"))
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

// LeaderOnly returns a handler that answers 200 "leader" while f is
// raised and 503 "follower (holder: …)" otherwise, for readiness probes
// that route traffic to the leader only.
func LeaderOnly(f *leadership.Flag) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if f.Raised() {
			fmt.Fprintln(w, "leader")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "follower (holder: %q)\n", f.Holder())
	})
}

// Checker is a named check of one flag, with the method set of client-go's
// healthz checks (Name and Check).
type Checker struct{ Flag *leadership.Flag }

// Name returns "leadership-" and the flag's name.
func (c Checker) Name() string { return "leadership-" + c.Flag.Name() }

// Check returns the flag's Check.
func (c Checker) Check(*http.Request) error { return c.Flag.Check() }
