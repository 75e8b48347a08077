package batchtest

import (
	"context"
	"slices"

	"github.com/dbflag/leadership/internal/sqlstore"
)

// SendTogether sends reqs through b.Send as one batch, as b sends requests
// that queued together (sorted by name), and returns their results in
// reqs' order: for tests of a store's Send.
func SendTogether[Req, Res any](ctx context.Context, b *sqlstore.Batcher[Req, Res], reqs ...Req) ([]Res, error) {
	batch := make([]*sqlstore.Pending[Req, Res], len(reqs))
	for i, r := range reqs {
		batch[i] = &sqlstore.Pending[Req, Res]{Ctx: ctx, Req: r}
	}
	sorted := slices.Clone(batch)
	sqlstore.SortByName(sorted, b.Name)
	results, err := b.Send(ctx, sorted)
	if err != nil {
		return nil, err
	}
	out := make([]Res, len(reqs))
	for i, p := range sorted {
		out[slices.Index(batch, p)] = results[i]
	}
	return out, nil
}
