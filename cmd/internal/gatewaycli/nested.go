package gatewaycli

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// adoptNestedChannelDirs moves what earlier versions kept one folder too deep
// (state_dir/telegram/telegram/..., the adapter's own name joined to a folder already named
// after it) to where the adapters now look (state_dir/telegram/...): the offset file and
// inbox journal of older versions still to be handed over, and the downloads the adapter's
// janitor prunes by age. Nothing else names those paths for long: a journaled message
// carries its media as platform references, fetched again after a restart, and a chat's
// history names the copy kept under state_dir/media. An entry whose new place is taken is
// left where it is, and the log says so.
func adoptNestedChannelDirs(stateDir string, log *slog.Logger) {
	for _, name := range []string{"telegram", "discord", "slack"} {
		parent := filepath.Join(stateDir, name)
		nested := filepath.Join(parent, name)
		entries, err := os.ReadDir(nested)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				log.Warn("cannot read a channel's folder an earlier version kept one level too deep", "dir", nested, "err", err)
			}
			continue
		}
		moved := 0
		for _, e := range entries {
			from, to := filepath.Join(nested, e.Name()), filepath.Join(parent, e.Name())
			if _, err := os.Lstat(to); err == nil {
				log.Warn("an earlier version's file is left in its old folder: a file of that name is already in the new one",
					"old", from, "new", to)
				continue
			}
			if err := os.Rename(from, to); err != nil {
				log.Warn("cannot move an earlier version's file to its new folder; it is left in the old one", "old", from, "new", to, "err", err)
				continue
			}
			moved++
		}
		if err := os.Remove(nested); err == nil || moved > 0 {
			log.Info("moved the channel's files an earlier version kept one folder too deep", "from", nested, "to", parent, "entries", moved)
		}
	}
}
