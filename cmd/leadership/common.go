package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
)

// defaultDSN is used when neither --dsn nor LEADERSHIP_DSN is set: a file
// in the current directory, so the tool works with no set-up at all.
const defaultDSN = "sqlite:leadership.db"

// common holds the flags every command takes.
type common struct {
	dsn, dsnFile         string
	dsnFrom, dsnFileFrom string // where each was set: "--dsn", "LEADERSHIP_DSN", ...; "" if not
	passDSN              bool   // run only: keep LEADERSHIP_DSN in the command's environment
	logLevel             string
	logFormat            string
}

// sourced is a string flag that remembers where it was set: Set records
// the command line, and parse records the environment variable after
// setting it from there.
type sourced struct {
	value, from *string
	name        string
}

func (v sourced) String() string {
	if v.value == nil {
		return ""
	}
	return *v.value
}

func (v sourced) Set(s string) error {
	*v.value, *v.from = s, "--"+v.name
	return nil
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
	c.dsn = defaultDSN
	fs.Var(sourced{&c.dsn, &c.dsnFrom, "dsn"}, "dsn", "database: "+storeopen.Usage+
		"; on the command line every local user can read it in ps: prefer --dsn-file")
	fs.Var(sourced{&c.dsnFile, &c.dsnFileFrom, "dsn-file"}, "dsn-file", "read the DSN from this file (its one line; a file other users cannot read), instead of --dsn")
	if name == "run" {
		fs.BoolVar(&c.passDSN, "pass-dsn", false, "pass LEADERSHIP_DSN on to the command's environment (by default it is removed, so that\n"+
			"the command and everything it starts do not inherit the password; LEADERSHIP_DSN_FILE is passed on)")
	}
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

// parse sets the flags of fs from args, then those args left unset from
// the environment (LEADERSHIP_<FLAG>): the command line wins. Flags may
// follow positional arguments (leadership release NAME --dsn X), except
// for run, whose positional arguments are the command and its own flags;
// after parse, fs.Args() are the positional arguments. When it fails, ok
// is false with the exit code: 0 for --help (the help is printed), else
// exitUsage (the error is printed, then a hint to --help). No error shows
// the value of --dsn.
func parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	fs.VisitAll(func(f *flag.Flag) { f.Usage += " (env " + envName(f.Name) + ")" })
	err := parseArgs(fs, args, fs.Name() != "run")
	if err == nil {
		onCommandLine := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
		fs.VisitAll(func(f *flag.Flag) {
			env := envName(f.Name)
			v := os.Getenv(env)
			if v == "" || err != nil || onCommandLine[f.Name] {
				return
			}
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("environment %s=%q: invalid value for --%s: %v", env, v, f.Name, serr)
				return
			}
			if s, ok := f.Value.(sourced); ok {
				*s.from = env
			}
		})
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

// open opens the store of --dsn or --dsn-file; a malformed DSN is a usage
// error that names where the DSN came from, never the DSN.
func (c *common) open(ctx context.Context) (*storeopen.Opened, error) {
	dsn, from, err := c.resolveDSN()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	o, err := storeopen.Open(ctx, dsn)
	if err != nil {
		if errors.Is(err, leadership.ErrInvalidArgument) {
			return nil, fmt.Errorf("%w: %s: %v", errUsage, from, err)
		}
		return nil, err
	}
	return o, nil
}

// maxDSNFile bounds what --dsn-file reads.
const maxDSNFile = 64 << 10

// resolveDSN returns the DSN to use and where it came from. --dsn and
// --dsn-file exclude each other, but one on the command line overrides
// the other's environment variable. Without either, inside the command of
// a leadership run (LEADERSHIP_HOLDER is set), which is not given
// LEADERSHIP_DSN, the default SQLite file would be another database than
// the parent's: that is refused.
func (c *common) resolveDSN() (dsn, from string, err error) {
	file, dsnSet := c.dsnFileFrom != "", c.dsnFrom != ""
	if file && dsnSet {
		switch {
		case strings.HasPrefix(c.dsnFrom, "--") && !strings.HasPrefix(c.dsnFileFrom, "--"):
			file = false
		case strings.HasPrefix(c.dsnFileFrom, "--") && !strings.HasPrefix(c.dsnFrom, "--"):
			dsnSet = false
		default:
			return "", "", fmt.Errorf("%s and %s both name the database: give one", c.dsnFrom, c.dsnFileFrom)
		}
	}
	switch {
	case file:
		from = fmt.Sprintf("%s %q", c.dsnFileFrom, c.dsnFile)
		dsn, err := readDSNFile(c.dsnFile)
		if err != nil {
			return "", "", fmt.Errorf("%s: %v", from, err)
		}
		return dsn, "the DSN in " + from, nil
	case dsnSet:
		return c.dsn, c.dsnFrom, nil
	case os.Getenv("LEADERSHIP_HOLDER") != "":
		return "", "", errors.New("no --dsn or --dsn-file, inside the command of a leadership run, which does not pass LEADERSHIP_DSN on " +
			"(the default sqlite:leadership.db would be another database): give --dsn-file (LEADERSHIP_DSN_FILE is passed on), " +
			"or --pass-dsn to that leadership run, or --dsn sqlite:leadership.db if that is the database meant")
	}
	return c.dsn, "--dsn (default)", nil
}

// readDSNFile reads the DSN in path: its one line, without surrounding
// space. It refuses a file every user may read, and never shows the
// file's content.
func readDSNFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if st.Mode().Perm()&0o004 != 0 {
		return "", fmt.Errorf("every user may read this file (mode %04o), which holds a password: chmod o-r it", st.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxDSNFile+1))
	if err != nil {
		return "", err
	}
	dsn := strings.TrimSpace(string(b))
	switch {
	case len(b) > maxDSNFile:
		return "", fmt.Errorf("longer than %d bytes: want the DSN on one line", maxDSNFile)
	case dsn == "":
		return "", errors.New("empty: want the DSN on one line")
	case strings.ContainsAny(dsn, "\r\n"):
		return "", errors.New("holds more than one line: want the DSN on one line")
	}
	return dsn, nil
}

// commandEnv is the environment of the command of `leadership run`: this
// process's with vars (KEY=VALUE) in place of any of the same name, without
// LEADERSHIP_DSN unless --pass-dsn asked for it, so that the command and
// every process it starts do not inherit a password (LEADERSHIP_DSN_FILE,
// a path, is passed on).
func (c *common) commandEnv(vars ...string) []string {
	env := os.Environ()
	if !c.passDSN {
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, envName("dsn")+"=") })
	}
	return withEnv(env, vars...)
}

// withEnv returns env with vars (KEY=VALUE) in place of every entry of
// the same KEY. A variable set twice is read differently by each program
// (C, Go and Python read the first copy, sh the last): the command of a
// leadership run inside another's must see its own run's LEADERSHIP_NAME,
// LEADERSHIP_HOLDER and LEADERSHIP_TOKEN, never the outer run's.
func withEnv(env []string, vars ...string) []string {
	env = slices.DeleteFunc(env, func(kv string) bool {
		key, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(vars, func(v string) bool { return strings.HasPrefix(v, key+"=") })
	})
	return append(env, vars...)
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
