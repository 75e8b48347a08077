package chaos

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain builds the worker program once, runs the tests and fails the
// package if any goroutine outlives them.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "chaos-worker-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workerBin, err = buildWorker(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
