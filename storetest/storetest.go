// Package storetest is the conformance suite that every
// [leadership.Store] must pass: the contract of the Store interface, checked
// against a real database, and the behaviours of [leadership.Flag] on that
// store under crashes, stalls, outages and evictions.
//
// An adapter's test calls [Run] with a function that opens a new store on
// the shared test database; each call must return a store with its own
// connection pool, as a separate process would have, so the suite can
// compete several "processes" for one flag. Tests isolate themselves by
// using fresh, random flag names, so the database may be shared with other
// tests and need not be empty. It must have no failover history, though:
// after the store's failover guard saw a new server incarnation (a crash
// recovery, a promotion; see docs/failover.md) new terms are held for a
// lease and numbered from the database clock, and the suite's checks of
// "version 1" and of prompt takeovers fail. Run it on a database or schema
// created after the server's last unclean restart
// (scripts/test-databases.sh recreates its databases on every run).
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/dbflag/leadership"
)

// Open returns a new store on the shared test database, with its own
// connection pool. It registers any cleanup with t.Cleanup.
type Open func(t testing.TB) leadership.Store

// Run runs the whole suite: [RunContract] and [RunFlags].
func Run(t *testing.T, open Open) {
	t.Helper()
	migrate(t, open)
	t.Run("contract", func(t *testing.T) { runContract(t, open) })
	t.Run("flags", func(t *testing.T) { runFlags(t, open) })
}

// RunContract checks the Store interface's contract only.
func RunContract(t *testing.T, open Open) {
	t.Helper()
	migrate(t, open)
	runContract(t, open)
}

// RunFlags checks Flag behaviours on the store only.
func RunFlags(t *testing.T, open Open) {
	t.Helper()
	migrate(t, open)
	runFlags(t, open)
}

// migrate applies the schema from three stores at once: Migrate must be
// idempotent and safe to run concurrently.
func migrate(t *testing.T, open Open) {
	t.Helper()
	errs := make(chan error, 3)
	for range 3 {
		s := open(t)
		go func() { errs <- s.Migrate(ctx(t)) }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	if err := open(t).Migrate(ctx(t)); err != nil {
		t.Fatalf("Migrate again (must be idempotent): %v", err)
	}
}

// uniqueName returns a flag name no other test uses.
func uniqueName(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := t.Name()
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	return name + "-" + hex.EncodeToString(b[:])
}

// ctx returns a context for one call, bounded so a hung database fails the
// test instead of hanging it.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}
