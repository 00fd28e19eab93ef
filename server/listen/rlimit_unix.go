//go:build unix

package listen

import "syscall"

// openFileLimit returns the process's limit on open file descriptors, or 0
// if it cannot tell.
func openFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return r.Cur
}
