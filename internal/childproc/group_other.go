//go:build !unix

package childproc

import "os/exec"

// OwnGroup does nothing without process groups: only the program itself is killed when
// it is cancelled (exec's default).
func OwnGroup(*exec.Cmd) {}

// NewGroup does nothing without process groups.
func NewGroup(*exec.Cmd) {}

// KillGroup does nothing without process groups.
func KillGroup(int) {}
