package postgres

// BatchStats reports how many batches and statements the store has sent.
func (s *Store) BatchStats() (batches, statements int64) {
	return s.batch.batches.Load(), s.batch.statements.Load()
}

// AloneBatches reports how many batches the store sent from their caller's
// goroutine, without the hop to a sender goroutine.
func (s *Store) AloneBatches() int64 { return s.batch.alone.Load() }
