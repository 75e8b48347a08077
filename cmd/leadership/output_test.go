//go:build linux

package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
	"github.com/dbflag/leadership/internal/testkit/testdb"
)

// openStore opens dsn as the command does, migrated, and writes a term of
// each flag of names.
func openStore(t *testing.T, dsn string, names ...string) *storeopen.Opened {
	t.Helper()
	ctx := context.Background()
	o, err := storeopen.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	if err := o.Store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if _, err := o.Store.Acquire(ctx, leadership.Request{Name: name, Holder: "host-" + name, Lease: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// exec runs a statement of another program on the store's database.
func (o storeopenT) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	var err error
	if o.Pool != nil {
		_, err = o.Pool.Exec(context.Background(), query, args...)
	} else {
		_, err = o.DB.Exec(query, args...)
	}
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

type storeopenT struct{ *storeopen.Opened }

// hostile are holder names another process could write, meant to move the
// cursor, retitle the terminal, forge rows or reverse text.
var hostile = []string{
	"\x1b]0;pwned\x07title", "\x1b[2Jclear", "cr\rforged 9 0.0s ago in 99.0s", "lf\nforged 9 0.0s ago in 99.0s",
	"evil\u202Eexe.sh", "tab\tx", "c1\u009b31m", "\"quoted\"", "bad utf-8 \xff",
}

// TestStatusEscapesWhatAnotherProcessWrote: names and holders written
// into the database by another process are printed by status and release
// with their control, format and bidirectional characters escaped, one
// table row per flag.
func TestStatusEscapesWhatAnotherProcessWrote(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flags.db")
	dsn := "sqlite:" + path
	var names []string
	for i := range hostile {
		names = append(names, "flag"+string(rune('a'+i)))
	}
	o := storeopenT{openStore(t, dsn, names...)}
	for i, h := range hostile {
		name := names[i] + h
		if i == 0 {
			name = names[i] // a name the command line can give to release
		}
		o.exec(t, `UPDATE leadership_flags SET holder = ?, name = ? WHERE name = ?`, h, name, names[i])
	}
	clean := func(what, out string) {
		t.Helper()
		for _, bad := range []string{"\x1b", "\x07", "\r", "\u202e", "\u009b", "\t", "\xff"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s prints %q raw:\n%q", what, bad, out)
			}
		}
	}
	code, out, errs := cli(t, "status", "--dsn", dsn)
	if code != 0 {
		t.Fatalf("status = %d: %s", code, errs)
	}
	clean("status", out)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1+len(hostile) {
		t.Errorf("status prints %d lines for %d flags:\n%s", len(lines), len(hostile), out)
	}
	for _, h := range hostile {
		if want := shown(h); !strings.Contains(out, want) {
			t.Errorf("status lacks %s:\n%s", want, out)
		}
	}
	code, out, errs = cli(t, "release", "--dsn", dsn, names[0])
	if code != 0 || !strings.Contains(out, `evicted "\x1b]0;pwned\atitle" from flaga`) {
		t.Errorf("release = %d, %q %q", code, out, errs)
	}
	clean("release", out)
	// JSON keeps the values exact (its encoding escapes what it must).
	code, out, _ = cli(t, "status", "--dsn", dsn, "--json")
	var got struct{ Flags []statusFlag }
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.Flags) != len(hostile) {
		t.Fatalf("status --json = %d:\n%s", code, out)
	}
}

// TestOneUnreadableRowHidesNoOther: a row whose time another program
// wrote out of the store's range (-infinity on PostgreSQL, text in
// SQLite's integer column or in a MariaDB column changed by hand) is
// shown as unreadable and named, while status lists the other flags and
// release evicts them, and the unreadable one too.
func TestOneUnreadableRowHidesNoOther(t *testing.T) {
	t.Parallel()
	for kind, c := range map[string]struct {
		dsn    func(t *testing.T) string
		poison []string
	}{
		"sqlite": {func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "flags.db") },
			[]string{`UPDATE leadership_flags SET renewed_at = 'soon', host_renewed_at = 'soon' WHERE name = 'b'`}},
		"postgres": {func(t *testing.T) string { return testdb.FreshPostgres(t) },
			[]string{`UPDATE leadership_flags SET renewed_at = '-infinity' WHERE name = 'b'`}},
		"mysql": {databases()["mysql"],
			[]string{`ALTER TABLE leadership_flags MODIFY renewed_at VARCHAR(32) NOT NULL`, `UPDATE leadership_flags SET renewed_at = 'soon' WHERE name = 'b'`}},
	} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dsn := c.dsn(t)
			o := storeopenT{openStore(t, dsn, "a", "b", "c")}
			for _, q := range c.poison {
				o.exec(t, q)
			}
			code, out, errs := cli(t, "status", "--dsn", dsn)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if code != exitFailure || len(lines) != 4 || !strings.HasPrefix(lines[1], "a ") || !strings.Contains(lines[1], "host-a") ||
				!strings.HasPrefix(lines[2], "b ") || !strings.Contains(lines[2], "unreadable") ||
				!strings.HasPrefix(lines[3], "c ") || !strings.Contains(lines[3], "host-c") ||
				!strings.Contains(errs, `flag "b": its row cannot be read`) || !strings.Contains(errs, "renewed_at") {
				t.Fatalf("status = %d:\n%s%s\nwant %d, flags a and c, and b named unreadable", code, out, errs, exitFailure)
			}
			code, out, _ = cli(t, "status", "--dsn", dsn, "--json")
			var got struct{ Flags []statusFlag }
			if code != exitFailure || json.Unmarshal([]byte(out), &got) != nil || len(got.Flags) != 3 ||
				got.Flags[0].Holder != "host-a" || got.Flags[1].Unreadable == "" || got.Flags[2].Holder != "host-c" {
				t.Fatalf("status --json = %d:\n%s", code, out)
			}
			if code, out, errs := cli(t, "release", "--dsn", dsn, "c"); code != 0 || !strings.Contains(out, "evicted host-c from c") {
				t.Fatalf("release c = %d: %s%s", code, out, errs)
			}
			if code, out, errs := cli(t, "release", "--dsn", dsn, "b"); code != exitFailure || !strings.Contains(out, "b: evicted its holder") {
				t.Fatalf("release b = %d: %s%s", code, out, errs)
			}
		})
	}
}
