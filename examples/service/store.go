package main

import (
	"context"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/storeopen"
)

// openStore opens the store named by dsn (sqlite:PATH, postgres://… or
// mysql://…) and returns a function that closes what it opened.
func openStore(ctx context.Context, dsn string) (leadership.Store, func(), error) {
	o, err := storeopen.Open(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	return o.Store, o.Close, nil
}
