//go:build !linux

package redistest

import "os/exec"

// setParentDeathSignal does nothing where the kernel offers no parent death
// signal; the test's cleanup still kills the server.
func setParentDeathSignal(*exec.Cmd) {}
