package childproc

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Run runs cmd so that the kernel kills it (SIGKILL) when the gateway dies, even by kill
// -9, rather than leaving it running as an orphan. Call OwnGroup first, if at all.
//
// The parent-death signal fires when the OS thread that started the program ends, not when
// the process does (golang/go#27505), and a Go thread ends whenever a goroutine locked to it
// returns without unlocking, in any package. Keeping this goroutine locked to its thread
// from Start to the end of Wait keeps every other goroutine off that thread while the
// program lives, so nothing can end it under the program. It holds one thread per program
// running, which the callers' timeouts bound.
func Run(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Run()
}
