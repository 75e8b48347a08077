//go:build unix

package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// proxy is a toxiproxy TCP proxy, run in the test process, between one
// worker and the database.
type proxy struct {
	t *testing.T
	p *toxiproxy.Proxy
}

func newProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "db", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(p.Stop)
	return &proxy{t: t, p: p}
}

func (p *proxy) addr() string { return p.p.Listen }

// toxic adds a toxic on both directions: typ with its JSON attributes.
func (p *proxy) toxic(typ, attrs string) {
	p.t.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"attributes":%s}`, typ+"_"+stream, typ, stream, attrs)
		if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			p.t.Fatalf("add toxic %s: %v", body, err)
		}
	}
}

// clear removes all toxics: data flows again.
func (p *proxy) clear() { p.p.Toxics.ResetToxics(context.Background()) }

// scenarioNetwork puts worker a behind a proxy and makes it the holder,
// then: cuts its connection without closing it (a black hole: nothing
// passes, nothing fails fast), so a follower must raise within crashBound;
// heals it and checks a can lead again; then adds latency above the call
// timeout, so a loses the flag and a follower must raise within crashBound.
func scenarioNetwork(t *testing.T, db database) {
	px := newProxy(t, db.addr)
	c := newCluster(t, db.dsn)
	a := c.start(db.via(px.addr()), 0)
	if got := c.leader(); got != a {
		t.Fatalf("leader = %s, want the only worker %s", got, a)
	}
	b, d := c.start("", 0), c.start("", 0)

	at := Mono()
	px.toxic("timeout", `{"timeout":0}`) // a black hole until cleared
	next, took := c.waitLeader(crashBound, at, a)
	c.record("partition", took)
	t.Logf("partition: %s took over from %s after %v", next, a, took.Round(time.Millisecond))
	time.Sleep(lease)
	px.clear()
	time.Sleep(lease) // a is back, as a follower; the checker sees it

	// Only a is left: it must lead again once its connection works.
	at = c.term(b)
	c.term(d)
	if got, _ := c.waitLeader(crashBound, at); got != a {
		t.Fatalf("after healing, %s raised, want %s", got, a)
	}

	// Latency: each call takes 2 × 300 ms, longer than the 200 ms timeout,
	// so a's renewals fail and its trust window runs out.
	e := c.start("", 0)
	at = Mono()
	px.toxic("latency", fmt.Sprintf(`{"latency":%d}`, (3*lease/10).Milliseconds()))
	next, took = c.waitLeader(crashBound, at, a)
	if next != e {
		t.Fatalf("leader after slowing %s down = %s, want %s", a, next, e)
	}
	c.record("latency", took)
	t.Logf("latency: %s took over from %s after %v", next, a, took.Round(time.Millisecond))
	time.Sleep(lease)
	px.clear()
}
