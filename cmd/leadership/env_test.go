//go:build linux

package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestANestedRunGivesItsCommandItsOwnNameHolderAndToken: the command of a
// leadership run inside another's command gets the inner run's
// LEADERSHIP_NAME, LEADERSHIP_HOLDER and LEADERSHIP_TOKEN, once each. The
// command is env, which prints the environment as the process got it: a
// second copy of a variable would show, and C, Go and Python read the
// first.
func TestANestedRunGivesItsCommandItsOwnNameHolderAndToken(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "flags.db")
	// The outer flag's first term ends with this run: the nested one's
	// outer term is version 2, its inner term version 1.
	if code, _, errs := cli(t, "run", "--dsn", dsn, "--name", "outer", "--", "true"); code != 0 {
		t.Fatalf("run --name outer -- true = %d: %s", code, errs)
	}
	code, out, errs := cli(t, "run", "--dsn", dsn, "--name", "outer", "--process", "outer-host", "--",
		bin, "run", "--dsn", dsn, "--name", "inner", "--process", "inner-host", "--", "env")
	if code != 0 {
		t.Fatalf("nested run = %d: %s", code, errs)
	}
	var got []string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "LEADERSHIP_NAME=") || strings.HasPrefix(line, "LEADERSHIP_HOLDER=") || strings.HasPrefix(line, "LEADERSHIP_TOKEN=") {
			got = append(got, line)
		}
	}
	slices.Sort(got)
	if want := []string{"LEADERSHIP_HOLDER=inner-host", "LEADERSHIP_NAME=inner", "LEADERSHIP_TOKEN=1"}; !slices.Equal(got, want) {
		t.Fatalf("the inner command's environment holds %q, want %q", got, want)
	}
}
