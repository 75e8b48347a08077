package testdb

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// CheckUnreadable checks what a store's Flags returned (recs, err) for a
// table of rows named good and bad..., where the row named after each of
// bad holds a NULL in that column: every row is listed, the bad ones with
// their names only, and err is a [sqlstore.UnreadableRows] naming each bad
// row and its column.
func CheckUnreadable(t testing.TB, recs []leadership.Record, err error, good string, bad []string) {
	t.Helper()
	var rows sqlstore.UnreadableRows
	if !errors.As(err, &rows) {
		t.Fatalf("Flags = %v, want an error listing the unreadable rows", err)
	}
	var named []string
	for _, r := range rows {
		named = append(named, r.Name)
		if !strings.Contains(r.Reason(), r.Name) || !strings.Contains(r.Reason(), "NULL") {
			t.Errorf("the reason for row %s is %q, want its column and NULL named", r.Name, r.Reason())
		}
	}
	slices.Sort(named)
	if want := slices.Sorted(slices.Values(bad)); !slices.Equal(named, want) {
		t.Errorf("unreadable rows %v, want %v", named, want)
	}
	if len(recs) != len(bad)+1 {
		t.Fatalf("Flags listed %d rows (%+v), want %d", len(recs), recs, len(bad)+1)
	}
	for _, r := range recs {
		switch {
		case r.Name == good && (r.Holder == "" || r.Version == 0 || r.ExpiresAt.IsZero()):
			t.Errorf("the readable row was read as %+v", r)
		case r.Name != good && r != (leadership.Record{Name: r.Name}):
			t.Errorf("the unreadable row %s was listed with %+v, want its name only", r.Name, r)
		}
	}
}
