//go:build !linux

package childproc

import "os/exec"

// Run runs cmd. Only Linux has a parent-death signal; elsewhere a program a crashed
// gateway started runs on until it ends by itself.
func Run(cmd *exec.Cmd) error { return cmd.Run() }
