package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/dbflag/leadership"
)

const quarantineExamples = `  leadership quarantine --for 30s
  leadership quarantine --dsn postgres://app@db/app --for 2m   # from a failover hook

Holds every flag of the database (the schema, on PostgreSQL): no new term
starts before the database clock reaches now + D, or the end of a longer
hold already in force (a hold is never shortened). Holders whose term has
not expired keep renewing it, so a live leader stays the leader; nobody
takes over from a crashed or released one until the hold ends.

The postgres and mysql stores hold every flag by themselves for one
longest lease when they notice that the server restarted after a crash or
a replica was promoted (the failover guard). Use this command for a
failover they cannot see: a switch to another cluster (DNS, a proxy), a
restore from a backup, a replica that was promoted by hand while the old
primary's clients could still write. Give D at least your longest --lease
(Lease), counted from the moment the old database stopped taking writes.
The sqlite store has no guard: its database cannot fail over.
`

func quarantineCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlagSet("quarantine", "quarantine [flags]", quarantineExamples, stderr, &c)
	d := fs.Duration("for", leadership.DefaultLease, "how long no new term starts, by the database clock: at least the longest lease in use")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "quarantine", fmt.Errorf("%w: quarantine takes no arguments, got %q", errUsage, fs.Args()))
	}
	if *d <= 0 {
		return usageError(stderr, "quarantine", fmt.Errorf("%w: --for %v: give a positive duration such as 30s", errUsage, *d))
	}
	store, err := c.openChecked(ctx)
	if err != nil {
		return report(stderr, err, exitUnavailable)
	}
	defer store.Close()
	q, ok := store.Store.(leadership.Quarantiner)
	if !ok {
		return report(stderr, fmt.Errorf("the %s store has no failover guard to hold: its database cannot fail over", store.Kind), exitFailure)
	}
	until, err := q.Quarantine(ctx, *d)
	if err != nil {
		return report(stderr, err, exitFailure)
	}
	fmt.Fprintf(stdout, "no new term starts before %s by the database clock (at least %v from now); holders keep renewing\n",
		until.UTC().Format(time.RFC3339Nano), *d)
	return exitOK
}

// holdOf reports the end of the hold in force on store, if it has one
// (zero otherwise).
func holdOf(ctx context.Context, store leadership.Store) (time.Time, error) {
	q, ok := store.(leadership.Quarantiner)
	if !ok {
		return time.Time{}, nil
	}
	until, now, err := q.QuarantinedUntil(ctx)
	if err != nil || !until.After(now) {
		return time.Time{}, err
	}
	return until, nil
}
