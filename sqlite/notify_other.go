//go:build !linux

package sqlite

import "errors"

// fileChanges is not available here: flags in other processes notice a
// release at their next poll.
func fileChanges(dir, name string) (<-chan struct{}, func(), error) {
	return nil, nil, errors.New("sqlite: file-change signals are implemented on Linux only")
}

// announceRelease does nothing where no watcher runs.
func announceRelease(string) {}
