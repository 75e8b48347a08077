package healthz_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/healthz"
	"github.com/dbflag/leadership/sqlite"
)

func Example() {
	db, _ := sqlite.Open(":memory:")
	defer db.Close()
	store, _ := sqlite.New(db)
	flag, err := leadership.NewFlag().Store(store).Name("api").Build(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer flag.Close()

	mux := http.NewServeMux()
	mux.Handle("/healthz", healthz.Liveness(flag))  // liveness probe
	mux.Handle("/leader", healthz.LeaderOnly(flag)) // readiness probe: only the leader gets traffic

	for _, path := range []string{"/healthz", "/leader"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Print(path, " ", rec.Code, " ", rec.Body.String())
	}
	// Output:
	// /healthz 200 ok
	// /leader 200 leader
}
