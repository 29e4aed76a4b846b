// Package childproc runs the programs the gateway starts (hook programs, speech tools) so
// that none outlives what it was started for: cancellation kills the program's whole
// process group, and on Linux the kernel kills the program when the gateway dies, even by
// kill -9.
package childproc
