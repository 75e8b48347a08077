//go:build !unix

package sqlite

// prepareFile leaves the file to SQLite where there are no Unix
// permissions to set.
func prepareFile(string) error { return nil }
