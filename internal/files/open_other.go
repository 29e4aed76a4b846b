//go:build !unix

package files

import "os"

// OpenAppend opens path for appending, creating it (0600) when missing.
func OpenAppend(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
}
