package schema

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	want := [][2]string{{"name", "text"}, {"version", "bigint"}}
	if err := Check("x", map[string]string{"name": "text", "version": "bigint", "extra": "int"}, want); err != nil {
		t.Fatalf("a matching table: %v", err)
	}
	err := Check("x", map[string]string{"name": "text", "version": "text"}, want)
	if err == nil || !strings.Contains(err.Error(), "version bigint (is text)") {
		t.Fatalf("mistyped column: %v", err)
	}
	err = Check("x", map[string]string{}, want)
	if err == nil || !strings.Contains(err.Error(), "name text (is missing)") {
		t.Fatalf("missing column: %v", err)
	}
}

func TestOnceRemembersSuccessOnly(t *testing.T) {
	var o Once
	calls := 0
	fail := errors.New("down")
	run := func(err error) error {
		return o.Do(context.Background(), func(context.Context) error { calls++; return err })
	}
	if err := run(fail); !errors.Is(err, fail) {
		t.Fatalf("first call = %v, want its error", err)
	}
	if err := run(nil); err != nil || calls != 2 {
		t.Fatalf("after a failure: %v, %d calls; want a second call that succeeds", err, calls)
	}
	if err := run(fail); err != nil || calls != 2 {
		t.Fatalf("after a success: %v, %d calls; want nil without a call", err, calls)
	}
}

func TestOnceRunsOneAtATimeAndWaitersHonourTheirContext(t *testing.T) {
	var o Once
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- o.Do(context.Background(), func(context.Context) error { close(started); <-release; return nil })
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := o.Do(ctx, func(context.Context) error { t.Error("ran while another call runs"); return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiter whose context ends = %v, want DeadlineExceeded", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := o.Do(context.Background(), func(context.Context) error { t.Error("ran after a success"); return nil }); err != nil {
		t.Fatal(err)
	}
}
