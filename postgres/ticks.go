package postgres

import "github.com/dbflag/leadership"

// MaxAcquireBatch is the most Acquire calls the store sends in one batch.
// It tells flags that the store batches: the holders of its flags renew
// at ticks they share (see [leadership.FlagBuilder.RenewInterval]), in
// groups of half a batch, so their renewals are due at one instant and
// travel in a few batches per group, whatever the load, instead of
// batching only when attempts happen to overlap.
func (s *Store) MaxAcquireBatch() int { return maxBatch }

// RenewalTicks returns the grid of renewal ticks shared by the flags of
// the store in this process (leadership.AcquireBatcher).
func (s *Store) RenewalTicks() *leadership.RenewalTicks { return &s.ticks }
