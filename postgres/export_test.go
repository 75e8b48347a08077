package postgres

// BatchStats reports how many batches and statements the store has sent.
func (s *Store) BatchStats() (batches, statements int64) {
	batches, statements, _ = s.batch.Stats()
	return batches, statements
}

// AloneBatches reports how many batches the store sent from their caller's
// goroutine, without the hop to a sender goroutine.
func (s *Store) AloneBatches() int64 {
	_, _, alone := s.batch.Stats()
	return alone
}
