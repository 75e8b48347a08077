package schema

import (
	"strings"
	"testing"
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
