package sqlstore

import (
	"context"
	"errors"
	"testing"
)

var errTransient, errOther = errors.New("deadlock"), errors.New("syntax")

func isTransient(err error) bool { return errors.Is(err, errTransient) }

func TestRetryOnce(t *testing.T) {
	for _, c := range []struct {
		name  string
		errs  []error // what the attempts return
		calls int
		want  error
	}{
		{"success", []error{nil}, 1, nil},
		{"other error", []error{errOther}, 1, errOther},
		{"transient then success", []error{errTransient, nil}, 2, nil},
		{"transient twice", []error{errTransient, errTransient}, 2, errTransient},
	} {
		calls := 0
		err := RetryOnce(context.Background(), isTransient, func() error { calls++; return c.errs[calls-1] })
		if !errors.Is(err, c.want) || (c.want == nil && err != nil) || calls != c.calls {
			t.Errorf("%s: %v after %d calls; want %v after %d", c.name, err, calls, c.want, c.calls)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	if err := RetryOnce(ctx, isTransient, func() error { calls++; return errTransient }); !errors.Is(err, errTransient) || calls != 1 {
		t.Errorf("ended context: %v after %d calls; want the first error without a retry", err, calls)
	}
}

type fakeRows struct{ rows [][2]string }

func (r *fakeRows) Next() bool { return len(r.rows) > 0 }
func (r *fakeRows) Err() error { return nil }
func (r *fakeRows) Scan(dest ...any) error {
	*dest[0].(*string), *dest[1].(*string) = r.rows[0][0], r.rows[0][1]
	r.rows = r.rows[1:]
	return nil
}

func TestColumns(t *testing.T) {
	got, err := Columns(&fakeRows{[][2]string{{"Name", "VARCHAR"}, {"version", "bigint"}}})
	if err != nil || len(got) != 2 || got["name"] != "varchar" || got["version"] != "bigint" {
		t.Fatalf("Columns = %v, %v; want name varchar, version bigint in lower case", got, err)
	}
}

func TestVersion(t *testing.T) {
	absent := func(err error) bool { return errors.Is(err, errTransient) }
	v, dirty, err := Version(func(dest ...any) error { *dest[0].(*int64), *dest[1].(*bool) = 3, true; return nil }, absent)
	if v != 3 || !dirty || err != nil {
		t.Errorf("a row: %d, %v, %v; want 3, true, nil", v, dirty, err)
	}
	if v, dirty, err := Version(func(...any) error { return errTransient }, absent); v != 0 || dirty || err != nil {
		t.Errorf("no table: %d, %v, %v; want 0, false, nil", v, dirty, err)
	}
	if _, _, err := Version(func(...any) error { return errOther }, absent); !errors.Is(err, errOther) {
		t.Errorf("other error: %v; want it returned", err)
	}
}
