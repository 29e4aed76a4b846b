//go:build unix

package audio

import (
	"os/exec"
	"syscall"
)

// setProcessGroup makes cancellation kill the program's whole process group, so a wrapper
// script cannot leave its children running.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
