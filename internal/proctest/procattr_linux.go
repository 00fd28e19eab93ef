package proctest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill a started sluice when the test binary
// dies, even when it dies without running its cleanups (a test timeout).
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
