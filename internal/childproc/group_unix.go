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

// NewGroup starts cmd as the leader of a new process group, for a caller that cannot use
// OwnGroup (a library starts and stops cmd) and ends the group itself with KillGroup.
func NewGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// KillGroup kills the process group pgid, what is left of it.
func KillGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // ESRCH: nothing left, which is the goal
}
