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

// envPrefix prefixes the environment variable of every flag: --lease is
// also LEADERSHIP_LEASE, --skip-if-held LEADERSHIP_SKIP_IF_HELD.
const envPrefix = "LEADERSHIP_"

// envName is the environment variable that sets the flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// newFlagSet returns a flag set for the command name with the common
// flags, whose usage prints synopsis, the flags and examples.
func newFlagSet(name, synopsis, examples string, stderr io.Writer, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.dsn, "dsn", defaultDSN, "database: "+storeopen.Usage)
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format on stderr: text or json")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: leadership %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nEvery flag can also be set in the environment, as the name after it says\n"+
			"(--lease 30s is %s=30s); a flag on the command line wins over the environment.\n", envName("lease"))
		fmt.Fprintf(stderr, "\nExamples:\n%s", examples)
	}
	return fs
}

// parse sets the flags of fs from the environment (LEADERSHIP_<FLAG>),
// then from args, which win. Flags may follow positional arguments
// (leadership release NAME --dsn X), except for run, whose positional
// arguments are the command and its own flags; after parse, fs.Args() are
// the positional arguments. When it fails, ok is false with the exit
// code: 0 for --help (the help is printed), else exitUsage (the error is
// printed, then a hint to --help).
func parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := envName(f.Name)
		f.Usage += " (env " + env + ")"
		if v := os.Getenv(env); v != "" && err == nil {
			if serr := fs.Set(f.Name, v); serr != nil {
				if f.Name == "dsn" {
					v = storeopen.Redact(v)
				}
				err = fmt.Errorf("environment %s=%q: invalid value for --%s: %v", env, v, f.Name, serr)
			}
		}
	})
	if err == nil {
		err = parseArgs(fs, args, fs.Name() != "run")
	}
	switch {
	case err == nil:
		return exitOK, true
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return exitOK, false
	}
	return usageError(fs.Output(), fs.Name(), err), false
}

// parseArgs parses args into fs, taking flags among the positional
// arguments too when interleaved.
func parseArgs(fs *flag.FlagSet, args []string, interleaved bool) error {
	// The flag package prints the error and the whole usage on every
	// error; parse prints the error and a hint instead.
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = usage; fs.SetOutput(out) }()
	if !interleaved {
		return fs.Parse(args)
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			positional = append(positional, rest...) // everything after -- is positional
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	return fs.Parse(append([]string{"--"}, positional...))
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

// usageError prints the usage error err of the command cmd on one line,
// then a hint to its --help, as Go tools do, and returns exitUsage.
func usageError(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "leadership %s: %v\nRun 'leadership %s --help' for usage.\n", cmd, err, cmd)
	return exitUsage
}

// report prints err and returns the exit code for it: usage errors get
// exitUsage, others fallback.
func report(stderr io.Writer, err error, fallback int) int {
	fmt.Fprintln(stderr, "leadership:", err)
	if errors.Is(err, errUsage) {
		fmt.Fprintln(stderr, "Run 'leadership help' for usage.")
		return exitUsage
	}
	return fallback
}

// isSet reports whether the flag name was set, on the command line or in
// the environment.
func isSet(fs *flag.FlagSet, name string) (set bool) {
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
