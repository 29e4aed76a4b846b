package state

import (
	"os"
	"syscall"
)

// fdatasync syncs a file's data (and its size only when it changed), as bbolt does on Linux.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
