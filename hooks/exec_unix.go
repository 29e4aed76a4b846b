//go:build unix

package hooks

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts the program as the leader of a new process group and makes
// cancellation kill the whole group, so children of a shell script die with it.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		killProcessGroup(cmd.Process.Pid)
		return nil
	}
}

func killProcessGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // ESRCH: nothing left, which is the goal
}
