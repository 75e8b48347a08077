package main

import (
	"context"
	"fmt"
	"io"

	"github.com/dbflag/leadership"
)

const migrateExamples = `  leadership migrate
  leadership migrate --dsn postgres://admin@db/app?search_path=jobs

Apply the schema in a deployment step, then let applications run without
DDL privileges.
`

func migrateCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlagSet("migrate", "migrate [flags]", migrateExamples, stderr, &c)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "migrate", fmt.Errorf("%w: migrate takes no arguments, got %q", errUsage, fs.Args()))
	}
	store, err := c.openChecked(ctx)
	if err != nil {
		return report(stderr, err, exitUnavailable)
	}
	defer store.Close()
	if err := store.Store.Migrate(ctx); err != nil {
		return report(stderr, err, exitUnavailable)
	}
	if v, ok := store.Store.(leadership.SchemaVersioner); ok {
		version, dirty, err := v.SchemaVersion(ctx)
		if err != nil {
			return report(stderr, err, exitFailure)
		}
		fmt.Fprintf(stdout, "schema of %s at version %d (dirty: %v)\n", store.Kind, version, dirty)
		return exitOK
	}
	fmt.Fprintln(stdout, "schema applied")
	return exitOK
}
