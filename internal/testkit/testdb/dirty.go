package testdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"

	"github.com/dbflag/leadership"
)

// CheckDirtyBuild builds a flag on s, whose version table the caller has
// marked dirty at version, and checks that Build fails within seconds
// with an error wrapping [migrate.ErrDirty] that names the fix.
func CheckDirtyBuild(t testing.TB, s leadership.Store, dialect string, version int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := leadership.NewFlag().Store(s).Name("f").Build(ctx)
	took := time.Since(start)
	var dirty migrate.ErrDirty
	if err == nil || !errors.As(err, &dirty) || dirty.Version != version {
		t.Fatalf("Build on a dirty schema = %v, want an error wrapping migrate.ErrDirty{%d}", err, version)
	}
	for _, want := range []string{"dirty", fmt.Sprintf("migrations/%s/%04d_*.up.sql", dialect, version),
		"UPDATE leadership_schema_migrations SET dirty = false", "leadership migrate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Build error %q does not name the fix (%q)", err, want)
		}
	}
	if took > 10*time.Second {
		t.Errorf("Build took %v to fail on a dirty schema, want a few seconds", took)
	}
	t.Logf("Build failed after %v: %v", took, err)
}
