// Package state is the gateway's single-node durable state: one embedded bbolt file under
// state_dir holding the intake journal (messages accepted but not yet answered), the dedup
// window of platform message ids, per-chat settings and platform cursors, with the intake
// log beside it (see log.go): the journal's and the cursors' writes are records appended to
// it, applied to bbolt in one commit now and then. Every write is synced to disk before it
// returns, so what a caller was told is stored survives a crash, but for Done, which is
// synced with the next write or within doneSyncWithin (see there). Consumers depend on the
// small interfaces they need (see Journal, Settings, Cursors, RememberedKeys); cluster mode
// implements the same ones elsewhere.
package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"gateway/internal/files"
)

// FileName is the state file's name under state_dir.
const FileName = "state.db"

var (
	bucketJournal  = []byte("journal")  // seq (8 bytes, big endian) → entry
	bucketDedup    = []byte("dedup")    // dedup key → unix nanos first seen
	bucketSettings = []byte("settings") // scope "\x00" name → value
	bucketCursors  = []byte("cursors")  // name → value (and the dedup count)
	bucketPlaces   = []byte("places")   // seq → placement of the answer to that journal entry
)

// Limits bound the dedup window and the intake log.
type Limits struct {
	DedupMax int           // ids remembered at most (default 100,000)
	DedupAge time.Duration // and for at most this long (default 7 days)
	LogSize  int64         // the intake log's preallocated size: a checkpoint when full (default 1 MiB)
}

func (l Limits) withDefaults() Limits {
	if l.DedupMax <= 0 {
		l.DedupMax = 100_000
	}
	if l.DedupAge <= 0 {
		l.DedupAge = 7 * 24 * time.Hour
	}
	if l.LogSize <= 0 {
		l.LogSize = 1 << 20
	}
	return l
}

// DB is the open state file and its intake log. Safe for concurrent use.
type DB struct {
	db     *bolt.DB
	dir    string // the state directory: files written ahead are named relative to it
	limits Limits
	now    func() time.Time
	logger *slog.Logger

	mu                sync.Mutex // the log, and pend: what it holds that bbolt does not yet
	log               *intakeLog
	pend              pending
	checkpointFailing bool
	syncTimer         *time.Timer // syncs a Done written without a sync (doneSyncWithin)
	closed            bool
	aheadRestored     int // appends written back into their files at start (the tests read it)
	recovered         int // unanswered messages the intake log held at start
	brokenAside       bool
}

// Open opens (or creates) dir/state.db. A file that cannot be read as a state file (torn,
// truncated, not bbolt) is not a crash loop: it is renamed aside, the problem is logged in
// plain words, and a fresh state starts; what the old file held is lost, which the log says.
func Open(dir string, limits Limits, log *slog.Logger) (*DB, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	// Files written ahead are recorded relative to it, and found again after a restart from
	// another working directory.
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	path := dir + string(os.PathSeparator) + FileName
	// A state file that is not there, or empty, starts a new state; when the intake log
	// beside it holds records, the old one was lost (see openIntakeLog).
	fresh := true
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
		fresh = false
	}
	var aside string
	var brokenErr error
	db, err := openFile(path)
	if err != nil {
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("state: %s is in use by another gateway process (one state_dir per process)", path)
		}
		if errors.Is(err, fs.ErrPermission) {
			// Not a broken file: one the gateway may not open (left by a run as another
			// user, say). Moving it aside would throw good state away; the admin fixes this.
			return nil, fmt.Errorf("state: cannot open %s: permission denied; the gateway runs as user %d, which must be able to read and write state_dir (%s) and every file in it", path, os.Geteuid(), dir)
		}
		stamp := time.Now().UTC().Format("20060102T150405")
		aside = path + ".broken-" + stamp
		if rerr := os.Rename(path, aside); rerr != nil {
			return nil, fmt.Errorf("state: %s cannot be read (%v) nor moved aside: %w", path, err, rerr)
		}
		brokenErr = err
		if db, err = openFile(path); err != nil {
			return nil, fmt.Errorf("state: %w", err)
		}
		// The log is read as beside a lost state file (openIntakeLog): the messages taken
		// since its last checkpoint are still in it. A copy is kept for the admin.
		fresh = true
		if cerr := files.Copy(filepath.Join(dir, LogName), filepath.Join(dir, LogName+".broken-"+stamp)); cerr != nil && !errors.Is(cerr, os.ErrNotExist) {
			log.Warn("state: cannot keep a copy of the intake log beside the broken state file", "err", cerr)
		}
	}
	s := &DB{db: db, dir: dir, limits: limits.withDefaults(), now: time.Now, logger: log, brokenAside: aside != ""}
	if err := s.openIntakeLog(dir, fresh); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("state: the intake log: %w", err)
	}
	if aside != "" {
		log.Warn("the state file could not be read and was moved aside; starting with empty state: per-chat settings "+
			"(such as /voice), Slack threads followed, the record of messages already answered and unanswered messages "+
			"taken before the intake log's last checkpoint are lost; the unanswered messages the intake log still held are answered",
			"file", path, "moved_to", aside, "err", brokenErr, "recovered_messages", s.recovered)
	}
	return s, nil
}

var errLocked = errors.New("locked")

func openFile(path string) (db *bolt.DB, err error) {
	// bbolt panics on some corrupt files instead of returning an error.
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				_ = db.Close()
			}
			db, err = nil, fmt.Errorf("corrupt state file: %v", r)
		}
	}()
	// bbolt maps the file and trusts its meta page: a file cut shorter than the meta says
	// makes the first read past the end a SIGBUS, which no recover catches.
	if err := checkLength(path); err != nil {
		return nil, err
	}
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, errLocked
	}
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketJournal, bucketDedup, bucketSettings, bucketCursors, bucketKeys, bucketPlaces} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		// A torn page shows on a full read, not on open: check once at start.
		err = db.View(func(tx *bolt.Tx) error {
			var first error
			for e := range tx.Check() { // drained: Check's goroutine reads the tx until it closes
				if first == nil {
					first = e
				}
			}
			return first
		})
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// checkLength refuses a file shorter than its own meta pages say: truncated (a copy cut
// short, a full disk during a copy). A missing or empty file is new and fine.
func checkLength(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return err
	}
	// A meta page: a 16-byte page header, then magic, version, page size (uint32 each),
	// flags, the root bucket (16 bytes), the freelist page and the high-water page id.
	const magic = 0xED0CDAED
	var need int64
	var hdr [64]byte
	for _, at := range []int64{0, -1} {
		if at < 0 {
			// The second meta page sits one page in; its size is the first one's.
			ps := int64(binary.LittleEndian.Uint32(hdr[24:]))
			if binary.LittleEndian.Uint32(hdr[16:]) != magic || ps < 512 || ps > 1<<20 {
				break
			}
			at = ps
		}
		if _, err := f.ReadAt(hdr[:], at); err != nil {
			return fmt.Errorf("truncated state file (%d bytes)", fi.Size())
		}
		if binary.LittleEndian.Uint32(hdr[16:]) != magic {
			continue
		}
		ps, hw := int64(binary.LittleEndian.Uint32(hdr[24:])), int64(binary.LittleEndian.Uint64(hdr[56:]))
		if hw > 0 && hw < 1<<40 && ps*hw > need {
			need = ps * hw
		}
	}
	if fi.Size() < need {
		return fmt.Errorf("truncated state file: %d bytes, its pages need %d", fi.Size(), need)
	}
	return nil
}

// Close applies the intake log to the state file and closes both.
func (s *DB) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.syncTimer != nil {
		s.syncTimer.Stop()
	}
	err := s.checkpoint()
	if err != nil && s.log.unsynced {
		if serr := s.log.sync(); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	if cerr := s.log.f.Close(); err == nil {
		err = cerr
	}
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

func seqKey(seq uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	return b[:]
}
