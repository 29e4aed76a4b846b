//go:build unix

package files

import (
	"os"
	"syscall"
)

// OpenAppend opens path for appending, creating it (0600) when missing. A regular file
// cannot wait in the network poller, yet os.OpenFile tries: two fcntl calls to make it
// non-blocking, a refused epoll registration, two more to make it blocking again. Opened
// here and handed to os.NewFile as the blocking descriptor it is (NewFile only reads its
// flags), opening takes two system calls instead of six; a chat's history is opened once
// a turn.
func OpenAppend(path string) (*os.File, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_APPEND|syscall.O_CREAT|syscall.O_CLOEXEC, 0o600)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return os.NewFile(uintptr(fd), path), nil
	}
}
