package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

const statusExamples = `  leadership status
  leadership status --dsn postgres://app@db/app --json | jq '.flags[] | select(.held)'
`

// statusFlag is one row of `leadership status --json`.
type statusFlag struct {
	Name    string `json:"name"`
	Holder  string `json:"holder"`
	Held    bool   `json:"held"`
	Version int64  `json:"version"`
	// Seconds since the last renewal and until expiry, by the database
	// clock; expires_in_seconds is negative once expired.
	SinceRenewal float64   `json:"since_renewal_seconds"`
	ExpiresIn    float64   `json:"expires_in_seconds"`
	RenewedAt    time.Time `json:"renewed_at"`
	ExpiresAt    time.Time `json:"expires_at"`
	// Unreadable says why the row could not be read (a value written by
	// another program); only the name is then known.
	Unreadable string `json:"unreadable,omitempty"`
}

func statusCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	var asJSON bool
	fs := newFlagSet("status", "status [flags]", statusExamples, stderr, &c)
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "status", fmt.Errorf("%w: status takes no arguments, got %q", errUsage, fs.Args()))
	}
	store, err := c.openChecked(ctx)
	if err != nil {
		return report(stderr, err, exitUnavailable)
	}
	defer store.Close()
	records, now, unreadable, err := flags(ctx, store.Store)
	if err != nil {
		return report(stderr, err, exitUnavailable)
	}
	rows := statusRows(records, now, unreadable)
	hold, err := holdOf(ctx, store.Store)
	if err != nil {
		return report(stderr, err, exitUnavailable)
	}
	if asJSON {
		var holdUntil *time.Time // omitted when no hold is in force
		if !hold.IsZero() {
			u := hold.UTC()
			holdUntil = &u
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Now       time.Time    `json:"database_now"`
			HoldUntil *time.Time   `json:"hold_until,omitempty"`
			Flags     []statusFlag `json:"flags"`
		}{now, holdUntil, rows}); err != nil {
			return report(stderr, err, exitFailure)
		}
		return reportUnreadable(stderr, unreadable)
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tHOLDER\tVERSION\tRENEWED\tEXPIRES")
	for _, r := range rows {
		if r.Unreadable != "" {
			fmt.Fprintf(w, "%s\t?\t?\t?\tunreadable (below)\n", shown(r.Name))
			continue
		}
		holder, expires := shown(r.Holder), "in "+seconds(r.ExpiresIn)
		if !r.Held {
			holder = "-"
		}
		if r.ExpiresIn <= 0 {
			expires = seconds(-r.ExpiresIn) + " ago"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s ago\t%s\n", shown(r.Name), holder, r.Version, seconds(r.SinceRenewal), expires)
	}
	if err := w.Flush(); err != nil {
		return report(stderr, err, exitFailure)
	}
	if !hold.IsZero() {
		fmt.Fprintf(stdout, "hold: no new term starts for %s (failover guard or leadership quarantine)\n", seconds(hold.Sub(now).Seconds()))
	}
	return reportUnreadable(stderr, unreadable)
}

// flags lists the flags of store. Rows that cannot be read do not fail
// it: they come back with their name only, and unreadable maps each of
// their names to the reason.
func flags(ctx context.Context, store leadership.Store) (records []leadership.Record, now time.Time, unreadable map[string]string, err error) {
	records, now, err = store.Flags(ctx)
	var bad sqlstore.UnreadableRows
	if !errors.As(err, &bad) {
		return records, now, nil, err
	}
	unreadable = make(map[string]string, len(bad))
	for _, r := range bad {
		unreadable[r.Name] = r.Reason()
	}
	return records, now, unreadable, nil
}

// reportUnreadable names the rows that could not be read, on stderr, and
// returns exitFailure if there are any (the other rows were printed).
func reportUnreadable(stderr io.Writer, unreadable map[string]string) int {
	names := slices.Sorted(maps.Keys(unreadable))
	for _, name := range names {
		fmt.Fprintf(stderr, "leadership: flag %q: its row cannot be read (written by another program; correct it with SQL, keeping its version, the fencing token): %q\n", name, unreadable[name])
	}
	if len(names) > 0 {
		return exitFailure
	}
	return exitOK
}

// shown is s as printed for a person: as it is when every character is
// graphic (letters, marks, numbers, punctuation, symbols, spaces) and s
// does not start with a double quote, else quoted as a Go string, so that
// control characters (ESC, CR, LF), bidirectional overrides and other
// invisible characters that another process wrote into the database
// cannot move the cursor, forge rows or reorder text on the terminal.
func shown(s string) string {
	if s != "" && utf8.ValidString(s) && !strings.HasPrefix(s, `"`) &&
		strings.IndexFunc(s, func(r rune) bool { return !strconv.IsGraphic(r) }) < 0 {
		return s
	}
	return strconv.QuoteToGraphic(s)
}

// statusRows describes records as of now, the database clock.
func statusRows(records []leadership.Record, now time.Time, unreadable map[string]string) []statusFlag {
	rows := make([]statusFlag, 0, len(records))
	for _, r := range records {
		if why, bad := unreadable[r.Name]; bad {
			rows = append(rows, statusFlag{Name: r.Name, Unreadable: why})
			continue
		}
		rows = append(rows, statusFlag{
			Name: r.Name, Holder: r.Holder, Version: r.Version,
			Held:         r.Holder != "" && r.ExpiresAt.After(now),
			SinceRenewal: now.Sub(r.RenewedAt).Seconds(), ExpiresIn: r.ExpiresAt.Sub(now).Seconds(),
			RenewedAt: r.RenewedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC(),
		})
	}
	return rows
}

func seconds(s float64) string { return fmt.Sprintf("%.1fs", s) }
