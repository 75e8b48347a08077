//go:build unix

package chaos

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain builds the worker program once, runs the tests and fails the
// package if any goroutine of ours outlives them.
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
		// toxiproxy (the network scenarios' proxy, run in this process)
		// can leave a stage of a toxic chain blocked for good on a send
		// that no later stage reads, when its toxics change while a
		// connection closes (AddToxic racing the link's end, in
		// toxiproxy v2.12.0's link.go): its goroutine, not one of ours.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
