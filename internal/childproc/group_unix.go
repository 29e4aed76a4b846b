//go:build unix

package childproc

import (
	"os/exec"
	"syscall"
)

// OwnGroup starts cmd as the leader of a new process group and makes its cancellation kill
// the whole group, so that a wrapper script cannot leave its children running.
func OwnGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process != nil {
			KillGroup(cmd.Process.Pid)
		}
		return nil
	}
}

// KillGroup kills the process group pgid, what is left of it.
func KillGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // ESRCH: nothing left, which is the goal
}
