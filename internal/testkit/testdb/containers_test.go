package testdb

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go/wait"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeTarget stands for a container whose mapped MySQL port leads to addr.
type fakeTarget struct {
	wait.StrategyTarget // the methods mysqlLogin does not call
	addr                atomic.Value
	stopped             bool
}

func newFakeTarget(addr string) *fakeTarget {
	f := &fakeTarget{}
	f.addr.Store(addr)
	return f
}

func (f *fakeTarget) Host(context.Context) (string, error) {
	host, _, err := net.SplitHostPort(f.addr.Load().(string))
	return host, err
}

func (f *fakeTarget) MappedPort(context.Context, string) (network.Port, error) {
	_, port, err := net.SplitHostPort(f.addr.Load().(string))
	if err != nil {
		return network.Port{}, err
	}
	return network.ParsePort(port + "/tcp")
}

func (f *fakeTarget) State(context.Context) (*container.State, error) {
	if f.stopped {
		return &container.State{Status: "exited", ExitCode: 1}, nil
	}
	return &container.State{Status: "running", Running: true}, nil
}

// dockerProxy listens as Docker's proxy does for a published port while
// the entrypoint's initialisation server runs without networking: it
// accepts every connection and closes it at once. It counts them.
func dockerProxy(t *testing.T) (addr string, accepted *atomic.Int32) {
	t.Helper()
	accepted = new(atomic.Int32)
	return serve(t, func(c net.Conn) { accepted.Add(1); c.Close() }), accepted
}

// realServer returns the address and credentials of a MySQL or MariaDB
// server (LEADERSHIP_TEST_MYSQL_DSN, else a container).
func realServer(t *testing.T) *driver.Config {
	t.Helper()
	cfg, err := driver.ParseDSN(MySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestMySQLLoginWaitsThroughTheInitialisationServer(t *testing.T) {
	t.Parallel()
	server := realServer(t)
	proxy, accepted := dockerProxy(t)
	target := newFakeTarget(proxy)
	const initPhase = time.Second
	go func() {
		time.Sleep(initPhase)
		target.addr.Store(server.Addr) // the real server starts listening
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	w := &mysqlLogin{user: server.User, password: server.Passwd, database: server.DBName}
	if err := w.WaitUntilReady(ctx, target); err != nil {
		t.Fatalf("WaitUntilReady = %v, want nil once the real server answers", err)
	}
	if took := time.Since(start); took < initPhase {
		t.Fatalf("ready after %v, before the real server answered (%v)", took, initPhase)
	}
	if n := accepted.Load(); n < 2 {
		t.Fatalf("%d attempts while only the proxy listened, want it to keep trying", n)
	}
}

func TestMySQLLoginNeedsTheTestCredentials(t *testing.T) {
	t.Parallel()
	server := realServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	w := &mysqlLogin{user: server.User, password: "not-the-password", database: server.DBName}
	err := w.WaitUntilReady(ctx, newFakeTarget(server.Addr))
	if err == nil || !strings.Contains(err.Error(), "deadline exceeded") || !strings.Contains(err.Error(), "Access denied") {
		t.Fatalf("WaitUntilReady with a wrong password = %v, want a timeout that quotes the refused login", err)
	}
}

func TestMySQLLoginStopsWithTheContainer(t *testing.T) {
	t.Parallel()
	proxy, _ := dockerProxy(t)
	target := newFakeTarget(proxy)
	target.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err := (&mysqlLogin{user: "lead", password: "lead", database: "leadership"}).WaitUntilReady(ctx, target)
	if err == nil || !strings.Contains(err.Error(), "container stopped (exited, exit code 1)") {
		t.Fatalf("WaitUntilReady on a stopped container = %v, want an error saying it stopped", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("WaitUntilReady on a stopped container took %v, want it to give up at once", took)
	}
}
