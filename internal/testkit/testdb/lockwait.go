package testdb

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// CheckMigrateEndsWithItsContext checks a store whose migration lock
// another session holds (holder, as the error should name it): migrate,
// given 1 s, returns its context's error naming the migration lock and
// holder within 2 s of the context's end; once unlock has let the lock go,
// migrate succeeds. A migrate still waiting is let go by unlock, so that
// the test ends.
func CheckMigrateEndsWithItsContext(t testing.TB, migrate func(context.Context) error, holder string, unlock func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- migrate(ctx) }()
	select {
	case err := <-done:
		t.Logf("Migrate returned %v after its context's end, with: %v", time.Since(began)-time.Second, err)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "migration lock") {
			t.Fatalf("Migrate while another session holds the migration lock = %v; want the context's error, naming the migration lock", err)
		}
		if !strings.Contains(err.Error(), holder) {
			t.Fatalf("Migrate's error %q does not name %q, which holds the lock", err, holder)
		}
	case <-time.After(3 * time.Second):
		unlock()
		t.Fatalf("Migrate was still waiting for the migration lock 2 s after its context ended (then: %v)", <-done)
	}
	unlock()
	if err := migrate(context.Background()); err != nil {
		t.Fatalf("Migrate after the holder let the lock go: %v", err)
	}
}
