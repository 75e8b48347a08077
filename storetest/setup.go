package storetest

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/dbflag/leadership"
)

// Setup says how to set a store up wrongly, for [RunSetupFailures]. Every
// field is required.
type Setup struct {
	// NewNil calls the store's constructor with a nil database handle.
	NewNil func() error

	// WrongShape returns a store on a database of its own where a table
	// leadership_flags was made by hand with other columns than the store
	// needs (for example version of type text).
	WrongShape func(t testing.TB) leadership.Store
	// ShapeError lists what Migrate's error on that store must contain
	// (for example "wrong shape" and the column to fix).
	ShapeError []string

	// Unreachable returns a store that cannot reach its database, and the
	// secret its connection settings hold (a password; "" when there is
	// none). A store with a server connects to addr, where nothing
	// listens.
	Unreachable func(t testing.TB, addr string) (s leadership.Store, secret string)
	// UnreachableError is what Build's error on that store must contain
	// (for example "connect").
	UnreachableError string
}

// RunSetupFailures checks that a store set up wrongly fails with an error
// that says what to fix, never panics, and never shows a password: its
// constructor refuses a nil database handle with
// [leadership.ErrInvalidArgument]; Migrate refuses a flag table of the
// wrong shape; and Build fails at once, without the secret in its error,
// when the database cannot be reached.
func RunSetupFailures(t *testing.T, setup Setup) {
	t.Helper()
	if setup.NewNil == nil || setup.WrongShape == nil || setup.Unreachable == nil || setup.UnreachableError == "" || len(setup.ShapeError) == 0 {
		t.Fatal("storetest.RunSetupFailures: every field of Setup is required")
	}
	t.Run("NewRejectsNil", func(t *testing.T) {
		t.Parallel()
		if err := setup.NewNil(); !errors.Is(err, leadership.ErrInvalidArgument) {
			t.Fatalf("New(nil) = %v, want ErrInvalidArgument", err)
		}
	})
	t.Run("WrongTableShape", func(t *testing.T) {
		t.Parallel()
		err := setup.WrongShape(t).Migrate(context.Background())
		for _, want := range setup.ShapeError {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Migrate over a hand-made table = %v, want a shape error containing %q", err, want)
			}
		}
	})
	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
		s, secret := setup.Unreachable(t, addr)
		_, err = leadership.NewFlag().Store(s).Name("x").Build(context.Background())
		if err == nil || !strings.Contains(err.Error(), setup.UnreachableError) {
			t.Fatalf("Build with the database unreachable = %v, want an error containing %q", err, setup.UnreachableError)
		}
		if secret != "" && strings.Contains(err.Error(), secret) {
			t.Fatalf("the error shows the password: %v", err)
		}
	})
}
