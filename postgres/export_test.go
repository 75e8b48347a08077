package postgres

// BatchStats reports how many batches and statements the store has sent.
func (s *Store) BatchStats() (batches, statements int64) {
	return s.batch.batches.Load(), s.batch.statements.Load()
}
