package media

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	"gateway/internal/files"
)

// Store defaults: media are kept for 30 days and at most 1 GB.
const (
	DefaultMaxAge   = 30 * 24 * time.Hour
	DefaultMaxBytes = 1_000_000_000
	// pruneEvery is how often Keep prunes (the first Keep after this long).
	pruneEvery = time.Hour
)

// StoreConfig is the `media:` config section: how long and how much of what users sent is
// kept under state_dir/media for the conversation histories that reference it.
type StoreConfig struct {
	MaxAge   time.Duration `mapstructure:"max_age" json:"max_age"`
	MaxBytes int64         `mapstructure:"max_bytes" json:"max_bytes"`
}

// Store keeps the media users sent under one directory, where conversation histories
// reference them by path. Files older than MaxAge go first, then the oldest until the total
// is under MaxBytes; a history whose file was pruned still loads (the model is told the file
// is no longer available). Safe for concurrent use.
type Store struct {
	dir string
	cfg StoreConfig

	mu     sync.Mutex
	pruned time.Time
}

// WithDefaults is cfg as the store keeps to it: a zero limit takes its default.
func (cfg StoreConfig) WithDefaults() StoreConfig {
	if cfg.MaxAge == 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	return cfg
}

// OpenStore creates dir if needed. Zero limits take the defaults; a negative one disables
// that bound.
func OpenStore(dir string, cfg StoreConfig) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &Store{dir: dir, cfg: cfg}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Keep places a file under the store (a hard link when it can, else a copy) in a folder per
// day, and returns its new path. A file already under the store is returned as it is.
// Now and then (hourly) it prunes first.
func (s *Store) Keep(path, name string) (string, error) {
	s.mu.Lock()
	due := time.Since(s.pruned) > pruneEvery
	if due {
		s.pruned = time.Now()
	}
	s.mu.Unlock()
	if due {
		_, _, _ = s.Prune()
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if rel, err := filepath.Rel(s.dir, abs); err == nil && isDay(filepath.Dir(rel)) {
		return abs, nil // already kept (files elsewhere under the directory are not ours)
	}
	day := time.Now().UTC().Format("2006-01-02")
	if err := os.MkdirAll(filepath.Join(s.dir, day), 0o700); err != nil {
		return "", err
	}
	if name == "" {
		name = filepath.Base(path)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	dst := filepath.Join(s.dir, day, hex.EncodeToString(rnd[:])+"-"+safeName(name))
	if err := os.Link(path, dst); err == nil {
		now := time.Now()
		_ = os.Chtimes(dst, now, now) // the age counts from when it was kept
		return dst, nil
	}
	if err := files.Copy(path, dst); err != nil {
		return "", fmt.Errorf("keeping %s: %w", name, err)
	}
	return dst, nil
}

func isDay(s string) bool {
	_, err := time.Parse("2006-01-02", s)
	return err == nil
}

// safeName keeps a short, harmless form of a user's file name.
func safeName(name string) string {
	name = filepath.Base(name)
	var b strings.Builder
	for _, r := range name {
		switch {
		case r == '.' || r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := strings.TrimLeft(b.String(), ".")
	if r := []rune(out); len(r) > 80 {
		out = string(r[len(r)-80:])
	}
	if out == "" {
		out = "file"
	}
	return out
}

// Prune deletes files under the store older than MaxAge, then the oldest until the total
// is at most MaxBytes, and empty day folders. It walks the whole directory, so files other
// parts wrote there (the web chat's uploads) are bounded too.
func (s *Store) Prune() (removed int, freed int64, err error) {
	type file struct {
		path string
		size int64
		mod  time.Time
	}
	var files []file
	var total int64
	now := time.Now()
	var errs []error
	_ = filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, werr error) error {
		if werr != nil {
			return nil
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if s.cfg.MaxAge > 0 && now.Sub(info.ModTime()) > s.cfg.MaxAge {
			if err := os.Remove(p); err == nil {
				removed++
				freed += info.Size()
			} else if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			return nil
		}
		files = append(files, file{p, info.Size(), info.ModTime()})
		total += info.Size()
		return nil
	})
	if s.cfg.MaxBytes > 0 && total > s.cfg.MaxBytes {
		sort.Slice(files, func(i, j int) bool { return files[i].mod.Before(files[j].mod) })
		for _, f := range files {
			if total <= s.cfg.MaxBytes {
				break
			}
			if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
				continue
			}
			removed++
			freed += f.size
			total -= f.size
		}
	}
	// Empty day folders go too.
	entries, _ := os.ReadDir(s.dir)
	for _, e := range entries {
		if e.IsDir() && isDay(e.Name()) {
			_ = os.Remove(filepath.Join(s.dir, e.Name())) // fails unless empty
		}
	}
	return removed, freed, errors.Join(errs...)
}
