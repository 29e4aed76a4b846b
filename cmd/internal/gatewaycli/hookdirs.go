package gatewaycli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
)

// hookDirWarnings names each folder of hooks.dirs that was written into the config and does
// not exist or is not a folder: no hook loads from it, and a misspelt path would otherwise
// load nothing in silence. The default folder is left out: it is absent until the admin
// makes it, and that is no mistake.
func hookDirWarnings(cfg Config) []string {
	var out []string
	for i, dir := range cfg.Hooks.Dirs {
		if slices.Contains(defaultHookDirs(), dir) {
			continue
		}
		fi, err := os.Stat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			out = append(out, fmt.Sprintf("hooks.dirs[%d]: %s does not exist, so no hooks load from it", i, dir))
		case err == nil && !fi.IsDir():
			out = append(out, fmt.Sprintf("hooks.dirs[%d]: %s is not a folder, so no hooks load from it", i, dir))
		}
	}
	return out
}
