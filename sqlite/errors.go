package sqlite

import (
	"fmt"
	"strings"
)

// describe wraps err with what failed and, for a missing table, how to fix
// it.
func describe(what string, err error) error {
	if strings.Contains(err.Error(), "no such table") {
		return fmt.Errorf("sqlite: %s: table missing: run the migrations (Build does unless Migrate(false); or leadership migrate): %w", what, err)
	}
	return fmt.Errorf("sqlite: %s: %w", what, err)
}
