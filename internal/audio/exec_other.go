//go:build !unix

package audio

import "os/exec"

func setProcessGroup(*exec.Cmd) {}
