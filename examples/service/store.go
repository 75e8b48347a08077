package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/sqlite"
)

// openStore opens the store named by dsn and returns a function that
// closes what it opened.
func openStore(_ context.Context, dsn string) (leadership.Store, func(), error) {
	path, ok := strings.CutPrefix(dsn, "sqlite:")
	if !ok {
		return nil, nil, fmt.Errorf("-dsn %q: want sqlite:PATH", dsn)
	}
	db, err := sqlite.Open(path)
	if err != nil {
		return nil, nil, err
	}
	s, err := sqlite.New(db)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return s, func() { db.Close() }, nil
}
