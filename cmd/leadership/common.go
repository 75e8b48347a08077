package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
)

// defaultDSN is used when neither --dsn nor LEADERSHIP_DSN is set: a file
// in the current directory, so the tool works with no set-up at all.
const defaultDSN = "sqlite:leadership.db"

// common holds the flags every command takes.
type common struct {
	dsn       string
	logLevel  string
	logFormat string
}

// newFlagSet returns a flag set for the command name with the common
// flags, whose usage prints synopsis, the flags and examples.
func newFlagSet(name, synopsis, examples string, stderr io.Writer, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := os.Getenv("LEADERSHIP_DSN")
	if dsn == "" {
		dsn = defaultDSN
	}
	fs.StringVar(&c.dsn, "dsn", dsn, "database: "+storeopen.Usage+" (env LEADERSHIP_DSN)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format on stderr: text or json")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: leadership %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nExamples:\n%s", examples)
	}
	return fs
}

// parse parses args into fs. When it fails, the flag package has printed
// why (or the help), and ok is false with the exit code: 0 for --help, else
// exitUsage.
func parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	switch err := fs.Parse(args); {
	case err == nil:
		return exitOK, true
	case errors.Is(err, flag.ErrHelp):
		return exitOK, false
	}
	return exitUsage, false
}

// logger builds the stderr logger the flags ask for.
func (c *common) logger(stderr io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, c.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(c.logFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, opts)), nil
	}
	return nil, fmt.Errorf("%w: --log-format %q: want text or json", errUsage, c.logFormat)
}

// open opens the store of --dsn; a malformed DSN is a usage error.
func (c *common) open(ctx context.Context) (*storeopen.Opened, error) {
	o, err := storeopen.Open(ctx, c.dsn)
	if err != nil {
		if errors.Is(err, leadership.ErrInvalidArgument) {
			return nil, fmt.Errorf("%w: --dsn: %v", errUsage, err)
		}
		return nil, err
	}
	return o, nil
}

// openChecked checks the logging flags and opens the store for status,
// release and migrate, which do not log; its errors are usage errors or
// the database's.
func (c *common) openChecked(ctx context.Context) (*storeopen.Opened, error) {
	if _, err := c.logger(io.Discard); err != nil {
		return nil, err
	}
	return c.open(ctx)
}

// report prints err and returns the exit code for it: usage errors get
// exitUsage, others fallback.
func report(stderr io.Writer, err error, fallback int) int {
	fmt.Fprintln(stderr, "leadership:", err)
	if errors.Is(err, errUsage) {
		return exitUsage
	}
	return fallback
}
