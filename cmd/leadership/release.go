package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/dbflag/leadership"
)

const releaseExamples = `  leadership release nightly
  leadership release --dsn postgres://app@db/app indexer

Eviction keeps the version and clears the holder, so the evicted process's
next renewal fails and it stops its command. Nobody else can take over
before the evicted term's expiry by the database clock (at most one lease
after its last renewal), because the evicted process may still trust its
term until then: a takeover after "release" takes up to one lease, plus
the follower's jitter (lease/20 by default). A holder that releases by itself
(leadership run exiting, Flag.Close) hands over at the follower's next
attempt instead, without waiting for the expiry.
`

func releaseCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlagSet("release", "release [flags] NAME", releaseExamples, stderr, &c)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		return usageError(stderr, "release", fmt.Errorf("%w: release takes one flag name, got %q", errUsage, fs.Args()))
	}
	name := fs.Arg(0)
	store, err := c.openChecked(ctx)
	if err != nil {
		return report(stderr, err, exitUnavailable)
	}
	defer store.Close()
	records, now, unreadable, err := flags(ctx, store.Store)
	if err != nil {
		return report(stderr, err, exitUnavailable)
	}
	i := slices.IndexFunc(records, func(r leadership.Record) bool { return r.Name == name })
	if i < 0 {
		return report(stderr, fmt.Errorf("no flag named %q (see leadership status)", name), exitFailure)
	}
	r := records[i]
	evicted, err := store.Store.Evict(ctx, name)
	if err != nil {
		return report(stderr, err, exitFailure)
	}
	if why, bad := unreadable[name]; bad {
		what := "no holder to evict"
		if evicted {
			what = "evicted its holder"
		}
		fmt.Fprintf(stdout, "%s: %s; its row cannot be read, so when another process can take over is unknown\n", shown(name), what)
		return reportUnreadable(stderr, map[string]string{name: why})
	}
	if !evicted || r.Holder == "" {
		fmt.Fprintf(stdout, "%s was not held\n", shown(name))
		return exitOK
	}
	wait := max(r.ExpiresAt.Sub(now), 0).Round(time.Millisecond)
	fmt.Fprintf(stdout, "evicted %s from %s (version %d); another process can take over in %v, when the evicted term expires\n",
		shown(r.Holder), shown(name), r.Version, wait)
	return exitOK
}
