//go:build !unix

package server

// openFileLimit returns 0: the limit is unknown here.
func openFileLimit() uint64 { return 0 }
