package leadership_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: every
// Flag must stop its goroutines at Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
