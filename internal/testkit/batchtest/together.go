package batchtest

import (
	"context"
	"slices"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// SendTogether sends reqs through send as one batch, as a Batcher sends
// requests that queued together (sorted by name), and returns their
// results in reqs' order: for tests of a store's Send (its
// sqlstore.Batcher.Send).
func SendTogether(ctx context.Context, send func(context.Context, []*sqlstore.Pending) ([]leadership.Result, error), reqs ...leadership.Request) ([]leadership.Result, error) {
	batch := make([]*sqlstore.Pending, len(reqs))
	for i, r := range reqs {
		batch[i] = &sqlstore.Pending{Ctx: ctx, Req: r}
	}
	sorted := slices.Clone(batch)
	sqlstore.SortByName(sorted)
	results, err := send(ctx, sorted)
	if err != nil {
		return nil, err
	}
	out := make([]leadership.Result, len(reqs))
	for i, p := range sorted {
		out[slices.Index(batch, p)] = results[i]
	}
	return out, nil
}
