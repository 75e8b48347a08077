package sqlite

import "github.com/dbflag/leadership"

// MaxAcquireBatch is the most Acquire calls the store runs in one
// transaction. It tells flags that the store batches: the holders of its
// flags renew at ticks they share (see
// [leadership.FlagBuilder.RenewInterval]), in groups of half a batch, so
// their renewals are due at one instant and commit together, whatever the
// load, instead of batching only when attempts happen to overlap.
func (s *Store) MaxAcquireBatch() int { return maxBatch }

// RenewalTicks returns the grid of renewal ticks shared by the flags of
// the store in this process (leadership.AcquireBatcher).
func (s *Store) RenewalTicks() *leadership.RenewalTicks { return &s.ticks }
