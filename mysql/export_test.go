package mysql

// WatchStatements is the number of statements the store's watcher has
// sent, and WatchRings the number of rings it has heard.
func (s *Store) WatchStatements() int64 { return s.watchStatements.Load() }
func (s *Store) WatchRings() int64      { return s.watchRings.Load() }

// BellName is the name of the user-level lock of holder in database db.
var BellName = bellName
