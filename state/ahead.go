package state

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Appends written ahead. A chat's history file is appended at every save point, and its
// own sync was the second sync of every message (the first is Accept's). WriteAhead makes
// such an append durable through the intake log instead: the bytes go into the log as an
// unsynced record, after the file's write and before the message's Done, so that the next
// Accept's sync, or the timer within doneSyncWithin, makes them durable together. A
// checkpoint syncs the files written ahead since the last one before their records go;
// after a power cut the log's records are written back into files that lost them.
//
// What it risks is what a Done risks: a power cut within doneSyncWithin of an answer loses
// the turn's history together with its Done, and the message is answered again. A crash of
// the process loses nothing: the file's write is in the page cache.

// AheadMax is the largest append WriteAhead takes; a larger one is synced by its writer. A
// record that size fills the log's preallocated megabyte in 32 appends: a checkpoint each.
const AheadMax = 32 << 10

var errNotAhead = errors.New("not written ahead")

// WriteAhead records that data was written at off in the file at path, a file under the
// state directory that is only appended to. When it returns nil the append is as durable
// as a Done; otherwise nothing is recorded and the caller syncs the file itself.
func (s *DB) WriteAhead(path string, off int64, data []byte) error {
	if len(data) == 0 || len(data) > AheadMax || off < 0 {
		return errNotAhead
	}
	rel, err := filepath.Rel(s.dir, path)
	if err != nil || !filepath.IsLocal(rel) {
		return errNotAhead
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("state: closed")
	}
	return s.record(recAhead, uint64(off), 0, filepath.ToSlash(rel), data)
}

// syncAhead syncs the files written ahead since the last checkpoint. A file removed since
// (a chat's history deleted by hand) has nothing left to sync.
func (s *DB) syncAhead(files map[string]struct{}) error {
	for rel := range files {
		f, err := os.OpenFile(filepath.Join(s.dir, filepath.FromSlash(rel)), os.O_RDONLY, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		err = fdatasync(f)
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("syncing %s: %w", rel, err)
		}
	}
	return nil
}

// restoreAhead writes one record's bytes back into its file when the file lost them (a
// power cut before the file's pages reached the disk). It writes only after what the file
// still holds: a file shorter than the record's offset lost more than this log knows of
// (earlier records came first), or was cut or replaced by hand, and is left as it is.
func (s *DB) restoreAhead(rel string, off int64, data []byte) {
	if !filepath.IsLocal(filepath.FromSlash(rel)) {
		return
	}
	path := filepath.Join(s.dir, filepath.FromSlash(rel))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		s.logger.Warn("state: cannot restore a history written ahead", "file", path, "err", err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err == nil && fi.Size() < off {
		s.logger.Warn("state: a history file is shorter than the intake log says; left as it is",
			"file", path, "bytes", fi.Size(), "expected_at_least", off)
		return
	}
	have := make([]byte, len(data))
	n, rerr := f.ReadAt(have, off)
	if err == nil && n == len(data) && bytes.Equal(have, data) {
		return
	}
	if err == nil && rerr != nil && !errors.Is(rerr, io.EOF) {
		err = rerr
	}
	if err == nil {
		_, err = f.WriteAt(data, off)
	}
	if err != nil {
		s.logger.Warn("state: cannot restore a history written ahead", "file", path, "err", err)
		return
	}
	s.aheadRestored++
}
