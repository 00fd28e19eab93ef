//go:build !unix

package listen

// openFileLimit returns 0: the limit is unknown here.
func openFileLimit() uint64 { return 0 }
