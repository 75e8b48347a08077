package storetest

import (
	"testing"
	"time"

	"github.com/dbflag/leadership/memstore"
)

// TestMonitorReportsTwoRaisedFlags checks that the monitor's two-pass
// check still reports flags that are raised at once: two flags of one
// name on two separate databases both lead, for as long as they live.
func TestMonitorReportsTwoRaisedFlags(t *testing.T) {
	m := newMonitor(t)
	a := m.build(t, memstore.New(), "twice", lease)
	b := m.build(t, memstore.New(), "twice", lease)
	if !a.Raised() || !b.Raised() {
		t.Fatal("each flag should lead its own database")
	}
	deadline := time.Now().Add(5 * time.Second)
	for m.bad.Load() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// Stop the sampler, then take the report here rather than as this
	// test's failure.
	m.stop()
	_, _ = a.Close(), b.Close()
	msg := m.bad.Swap(nil)
	if msg == nil {
		t.Fatal("the monitor did not report two flags raised at once")
	}
	t.Logf("reported: %s", *msg)
}
