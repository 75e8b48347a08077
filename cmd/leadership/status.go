package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/dbflag/leadership"
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
	records, now, err := store.Store.Flags(ctx)
	if err != nil {
		return report(stderr, err, exitUnavailable)
	}
	rows := statusRows(records, now)
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
		return exitOK
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tHOLDER\tVERSION\tRENEWED\tEXPIRES")
	for _, r := range rows {
		holder, expires := r.Holder, "in "+seconds(r.ExpiresIn)
		if !r.Held {
			holder = "-"
		}
		if r.ExpiresIn <= 0 {
			expires = seconds(-r.ExpiresIn) + " ago"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s ago\t%s\n", r.Name, holder, r.Version, seconds(r.SinceRenewal), expires)
	}
	if err := w.Flush(); err != nil {
		return report(stderr, err, exitFailure)
	}
	if !hold.IsZero() {
		fmt.Fprintf(stdout, "hold: no new term starts for %s (failover guard or leadership quarantine)\n", seconds(hold.Sub(now).Seconds()))
	}
	return exitOK
}

// statusRows describes records as of now, the database clock.
func statusRows(records []leadership.Record, now time.Time) []statusFlag {
	rows := make([]statusFlag, 0, len(records))
	for _, r := range records {
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
