package testdb

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// CheckMigrateEndsWithItsContext checks a store whose migration lock
// another session holds (holder, as the error should name it): migrate,
// given 1 s, returns its context's error naming the migration lock and
// holder within 2 s of the context's end, and so does a migrate whose
// context has ended before it began (as one that ends before the wait
// for the lock begins, on a slow server); once unlock has let the lock
// go, migrate succeeds. A migrate still waiting is let go by unlock, so
// that the test ends.
func CheckMigrateEndsWithItsContext(t testing.TB, migrate func(context.Context) error, holder string, unlock func()) {
	t.Helper()
	namesTheHolder := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "migration lock") {
			t.Fatalf("Migrate %s while another session holds the migration lock = %v; want the context's error, naming the migration lock", what, err)
		}
		if !strings.Contains(err.Error(), holder) {
			t.Fatalf("Migrate's error %q (%s) does not name %q, which holds the lock", err, what, holder)
		}
	}
	ended, cancelEnded := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelEnded()
	namesTheHolder("with a context that has ended", migrate(ended))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- migrate(ctx) }()
	select {
	case err := <-done:
		t.Logf("Migrate returned %v after its context's end, with: %v", time.Since(began)-time.Second, err)
		namesTheHolder("given 1 s", err)
	case <-time.After(3 * time.Second):
		unlock()
		t.Fatalf("Migrate was still waiting for the migration lock 2 s after its context ended (then: %v)", <-done)
	}
	unlock()
	if err := migrate(context.Background()); err != nil {
		t.Fatalf("Migrate after the holder let the lock go: %v", err)
	}
}

// SilentServer listens on a loopback port, accepts connections and never
// answers, as a server that hangs; it returns the address.
func SilentServer(t testing.TB) string {
	var conns []net.Conn // closed when the test ends
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	return serve(t, func(c net.Conn) { conns = append(conns, c) })
}

// serve listens on a loopback port and hands each connection to handle,
// one after the other, until the test ends; it returns the address.
func serve(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}

// CheckMigrateEndsSoonAfterItsContext checks that migrate, on a store of
// a server that never answers (SilentServer), returns its context's error
// within 3 s of the context's end (0.3 s): the lookup of the migration
// lock's holder after the context's end is bounded too.
func CheckMigrateEndsSoonAfterItsContext(t testing.TB, migrate func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := migrate(ctx)
	after := time.Since(began) - 300*time.Millisecond
	t.Logf("Migrate on a server that never answers returned %v after its context's end, with: %v", after, err)
	if !errors.Is(err, context.DeadlineExceeded) || after > 3*time.Second {
		t.Fatalf("Migrate on a server that never answers, given 0.3 s = %v, %v after its context's end; want its context's error within 3 s", err, after)
	}
}
