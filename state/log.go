package state

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The intake log (LogName beside the state file) is written ahead of bbolt. A bbolt commit
// writes several pages and syncs twice (the pages, then the meta page); the intake writes
// three times a message (accept, done, the polling cursor), so most of what a message cost
// was those commits. Each write is now one record appended to a preallocated file and
// synced once; what the records say reaches bbolt in one commit now and then (a
// checkpoint), most of it never: a message accepted and answered between two checkpoints
// leaves only its dedup key. bbolt has no write-ahead mode of its own, hence this file.
//
// A record is its CRC-32 (IEEE) and length, then an epoch, a kind and the fields. A
// checkpoint stores epoch+1 in bbolt in the same commit that applies the records, and the
// log starts again at offset 0: records of an earlier epoch, left further on in the file,
// are no longer read. Reading stops at the first record that is torn, zero (the
// preallocated end) or of another epoch, unless records of this epoch follow (see replay).

// LogName is the intake log's name beside the state file.
const LogName = "journal.log"

const (
	recAccept byte = 1 // seq, unix nanos, dedup key, body
	recDone   byte = 2 // seq
	recCursor byte = 3 // name, value
	recPlace  byte = 4 // seq, placement: where the answer to an accepted message shows so far
	recAhead  byte = 5 // offset, file (relative to the state directory), bytes written there (ahead.go)

	recHeader = 8        // CRC-32 and payload length, both uint32
	recMax    = 64 << 20 // a longer length is a torn header, not a record
)

// logEpochKey is where the epoch is kept in the cursors bucket (no cursor starts with NUL).
var logEpochKey = []byte("\x00log_epoch")

// pending is what the log holds that bbolt does not yet: applied by the next checkpoint.
type pending struct {
	accepts map[uint64][]byte   // accepted this epoch and not yet done: seq → body
	keys    map[string]int64    // dedup keys accepted this epoch → unix nanos
	order   []string            // those keys in the order accepted
	dones   map[uint64]struct{} // done this epoch, accepted before it (in bbolt)
	places  map[uint64]string   // placements of answers to messages not done: seq → placement
	cursors map[string]string
	ahead   map[string]struct{} // files written ahead this epoch: synced before a checkpoint
	lastSeq uint64              // the journal's highest seq handed out
	records int
}

func newPending(lastSeq uint64) pending {
	return pending{accepts: map[uint64][]byte{}, keys: map[string]int64{}, dones: map[uint64]struct{}{},
		places: map[uint64]string{}, cursors: map[string]string{}, ahead: map[string]struct{}{}, lastSeq: lastSeq}
}

// apply adds one record's effect. It is the same for a write and for a replay. A cursor's
// key is its name, its body its value.
func (p *pending) apply(kind byte, seq uint64, at int64, key string, body []byte) {
	p.records++
	switch kind {
	case recAccept:
		p.accepts[seq] = body
		if key != "" {
			if _, ok := p.keys[key]; !ok {
				p.order = append(p.order, key)
			}
			p.keys[key] = at
		}
		p.lastSeq = max(p.lastSeq, seq)
	case recDone:
		delete(p.places, seq)
		if _, ok := p.accepts[seq]; ok {
			delete(p.accepts, seq)
		} else {
			p.dones[seq] = struct{}{}
		}
	case recPlace:
		if _, done := p.dones[seq]; !done {
			p.places[seq] = string(body)
		}
	case recCursor:
		p.cursors[key] = string(body)
	case recAhead:
		p.ahead[key] = struct{}{}
	}
}

// intakeLog is the open log file and where the next record goes.
type intakeLog struct {
	f     *os.File
	path  string
	off   int64
	size  int64 // preallocated: a checkpoint comes before a record would pass it
	epoch uint64
	buf   []byte

	unsynced bool // a record was written and not yet synced (a Done)
	syncs    int  // how many syncs so far (the tests count them)
}

// openLog opens (or creates and preallocates) the log. Preallocated blocks make a sync
// write data only: an append that grew the file would also have to write its size.
// found is the size the file had, -1 when there was none.
func openLog(path string, size int64, log *slog.Logger) (l *intakeLog, found int64, err error) {
	found = -1
	if fi, err := os.Stat(path); err == nil {
		found = fi.Size()
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, found, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, found, err
	}
	l = &intakeLog{f: f, path: path, size: max(size, fi.Size())}
	if fi.Size() < size {
		// A disk too full to preallocate is no reason not to start: zeros already written
		// read as the log's end, and records then grow the file as they come.
		err = l.zero(fi.Size(), size)
		if err == nil {
			err = syncDir(filepath.Dir(path))
		}
		if err != nil {
			log.Warn("state: cannot preallocate the intake log; it grows as it is written", "file", path, "err", err)
		}
	}
	return l, found, nil
}

// zero writes zeros from..to and syncs: the blocks exist before any record needs them.
func (l *intakeLog) zero(from, to int64) error {
	chunk := make([]byte, 64<<10)
	for off := from; off < to; off += int64(len(chunk)) {
		n := min(int64(len(chunk)), to-off)
		if _, err := l.f.WriteAt(chunk[:n], off); err != nil {
			return err
		}
	}
	return l.f.Sync()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}

// encode builds one record in l.buf.
func (l *intakeLog) encode(kind byte, seq uint64, at int64, key string, body []byte) []byte {
	b := append(l.buf[:0], make([]byte, recHeader)...)
	b = binary.BigEndian.AppendUint64(b, l.epoch)
	b = append(b, kind)
	switch kind {
	case recAccept:
		b = binary.BigEndian.AppendUint64(b, seq)
		b = binary.BigEndian.AppendUint64(b, uint64(at))
		b = binary.AppendUvarint(b, uint64(len(key)))
		b = append(b, key...)
	case recDone, recPlace:
		b = binary.BigEndian.AppendUint64(b, seq)
	case recAhead:
		b = binary.BigEndian.AppendUint64(b, seq)
		b = binary.AppendUvarint(b, uint64(len(key)))
		b = append(b, key...)
	case recCursor:
		b = binary.AppendUvarint(b, uint64(len(key)))
		b = append(b, key...)
	}
	b = append(b, body...)
	binary.BigEndian.PutUint32(b[4:], uint32(len(b)-recHeader))
	binary.BigEndian.PutUint32(b[0:], crc32.ChecksumIEEE(b[4:]))
	if cap(b) <= 64<<10 { // keep a small buffer for the next record, not a large body's
		l.buf = b
	}
	return b
}

// append writes one record at the end and syncs it.
// With sync false the record is only written: durable with the next synced one.
func (l *intakeLog) append(rec []byte, sync bool) error {
	if _, err := l.f.WriteAt(rec, l.off); err != nil {
		return err
	}
	if sync {
		if err := l.sync(); err != nil {
			return err
		}
	}
	l.off += int64(len(rec))
	l.size = max(l.size, l.off)
	if !sync {
		l.unsynced = true
	}
	return nil
}

func (l *intakeLog) sync() error {
	if err := fdatasync(l.f); err != nil {
		return err
	}
	l.unsynced = false
	l.syncs++
	return nil
}

// readRecord reads the next record from r and returns its payload (in buf's array); false
// at the log's end: zeros (preallocated space), or a torn or damaged record.
func readRecord(r io.Reader, buf []byte) ([]byte, bool) {
	var hdr [recHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, false
	}
	n := binary.BigEndian.Uint32(hdr[4:])
	if n < 9 || n > recMax {
		return nil, false
	}
	buf = slices.Grow(buf[:0], int(n))[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, false
	}
	sum := crc32.NewIEEE()
	_, _ = sum.Write(hdr[4:])
	_, _ = sum.Write(buf)
	return buf, sum.Sum32() == binary.BigEndian.Uint32(hdr[:4])
}

// firstEpoch is the epoch of the log's first record; false when it has none whole.
func (l *intakeLog) firstEpoch() (uint64, bool) {
	payload, ok := readRecord(io.NewSectionReader(l.f, 0, 1<<62), nil)
	if !ok {
		return 0, false
	}
	return binary.BigEndian.Uint64(payload), true
}

// replay reads the records of epoch into p; ahead, when not nil, gets each record of an
// append written ahead (restoreAhead).
//
// A record that cannot be read ends the log, as a crash leaves it (torn, or the zeros
// after the last record), unless a record of this epoch follows further on: a crash tears
// only the end, so that is other damage (the disk, a stray write; or a power cut that lost
// a write the next one's sync did not cover). The records after it are still read, since
// each one stands alone (a damaged Accept costs its message, a damaged Done answers one
// again, which dropping every later record would do to all of them), and the admin is told.
func (l *intakeLog) replay(epoch uint64, p *pending, ahead func(rel string, off int64, data []byte), log *slog.Logger) error {
	var (
		payload []byte
		damage  *logDamage
	)
	report := func() {
		if damage != nil {
			log.Error("state: a record in the middle of the intake log is damaged (not a crash's torn end: records follow it); "+
				"it was skipped and the records after it were kept. Had it accepted a message, that message is lost; "+
				"had it marked one answered, that one is answered again",
				"file", l.path, "offset", damage.off, "bytes_skipped", damage.skipped, "records_after", damage.after)
		}
	}
	r := bufio.NewReader(io.NewSectionReader(l.f, l.off, 1<<62))
	for {
		var ok bool
		payload, ok = readRecord(r, payload)
		if ok && binary.BigEndian.Uint64(payload) == epoch {
			kind, seq, key, body, err := decode(payload[8:], p)
			if err != nil {
				return fmt.Errorf("%s at offset %d: %w", l.path, l.off, err)
			}
			if kind == recAhead && ahead != nil {
				ahead(key, int64(seq), body)
			}
			l.off += recHeader + int64(len(payload))
			if damage != nil {
				damage.after++
			}
			continue
		}
		if ok {
			break // the end: a record an earlier epoch left
		}
		next, err := l.nextRecord(epoch, l.off+1)
		if err != nil {
			return err
		}
		if next < 0 {
			break // the end: torn, or zeros
		}
		report()
		damage = &logDamage{off: l.off, skipped: next - l.off}
		l.off = next
		r.Reset(io.NewSectionReader(l.f, l.off, 1<<62))
	}
	report()
	return nil
}

// logDamage is a stretch of the log that could not be read, with records after it.
type logDamage struct {
	off, skipped int64
	after        int
}

// nextRecord is the offset of the first whole record of epoch at or after from, -1 when
// there is none (the log's end). Only a log with a damaged record is searched so. A match
// inside another record's bytes would need a valid checksum over them, and the bodies are
// JSON or text, which hold none of the zero bytes a record's length and epoch begin with.
// Every start searches the preallocated zeros after the last record: the log is read a
// piece at a time, and only a place whose length and epoch fit is read whole, so the search
// holds no copy of the log.
func (l *intakeLog) nextRecord(epoch uint64, from int64) (int64, error) {
	const head = recHeader + 8 // the length and the epoch decide whether a record may start here
	buf := make([]byte, 64<<10)
	var rec []byte
	for base := from; ; {
		n, err := l.f.ReadAt(buf, base)
		if err != nil && !errors.Is(err, io.EOF) {
			return -1, err
		}
		last := n - head // the last place whose head this piece holds
		for i := 0; i <= last; i++ {
			size := int(binary.BigEndian.Uint32(buf[i+4:]))
			if size < 9 || size > recMax || binary.BigEndian.Uint64(buf[i+recHeader:]) != epoch {
				continue
			}
			rec = slices.Grow(rec[:0], recHeader+size)[:recHeader+size]
			if m, rerr := l.f.ReadAt(rec, base+int64(i)); m < len(rec) {
				if rerr != nil && !errors.Is(rerr, io.EOF) {
					return -1, rerr
				}
				continue // runs past the end of the file
			}
			if crc32.ChecksumIEEE(rec[4:]) == binary.BigEndian.Uint32(rec) {
				return base + int64(i), nil
			}
		}
		if n < len(buf) {
			return -1, nil // the file's end
		}
		base += int64(last + 1)
	}
}

// decode applies one record's kind and fields (after the epoch) to p, and returns them.
func decode(b []byte, p *pending) (kind byte, seq uint64, key string, body []byte, err error) {
	kind, b = b[0], b[1:]
	var at int64
	switch kind {
	case recAccept, recDone, recPlace, recAhead:
		if len(b) < 8 {
			return kind, 0, "", nil, errors.New("short record")
		}
		seq, b = binary.BigEndian.Uint64(b), b[8:]
		if kind == recDone || kind == recPlace {
			break
		}
		if kind == recAccept {
			if len(b) < 8 {
				return kind, 0, "", nil, errors.New("short record")
			}
			at, b = int64(binary.BigEndian.Uint64(b)), b[8:]
		}
		fallthrough
	case recCursor:
		n, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < n {
			return kind, 0, "", nil, errors.New("bad key length")
		}
		key, b = string(b[w:w+int(n)]), b[w+int(n):]
	default:
		return kind, 0, "", nil, fmt.Errorf("unknown record kind %d", kind)
	}
	if kind == recAhead {
		// Not kept in p: the bytes are in the file, or restored into it from here.
		p.apply(kind, seq, at, key, nil)
		return kind, seq, key, b, nil
	}
	body = append([]byte(nil), b...)
	p.apply(kind, seq, at, key, body)
	return kind, seq, key, body, nil
}

// record writes one record, checkpointing first when it would not fit, and applies it.
// Called with s.mu held.
func (s *DB) record(kind byte, seq uint64, at int64, key string, body []byte) error {
	rec := s.log.encode(kind, seq, at, key, body)
	if s.log.off > 0 && (s.log.off+int64(len(rec)) > s.log.size || len(s.pend.keys) >= s.keysPerCheckpoint()) {
		if err := s.checkpoint(); err != nil {
			// The log goes on growing: nothing is lost, the next record tries again.
			if !s.checkpointFailing {
				s.logger.Warn("state: cannot apply the intake log to the state file; the log grows until this works", "err", err)
			}
			s.checkpointFailing = true
		} else {
			s.checkpointFailing = false
			rec = s.log.encode(kind, seq, at, key, body) // under the new epoch
		}
	}
	// A Done is not synced on its own: the next Accept or cursor syncs it, or the timer
	// within doneSyncWithin. See doneSyncWithin for what that risks. A placement neither:
	// it is written while the answer streams, and a crash of the process keeps the write.
	// Nor an append written ahead (ahead.go): it comes before its message's Done.
	// The timer is armed by the first unsynced record only: re-arming it for each Done
	// would put the sync off for as long as Dones come closer together than the window.
	lazy := kind == recDone || kind == recPlace || kind == recAhead
	sync, arm := !lazy, lazy && !s.log.unsynced
	if err := s.log.append(rec, sync); err != nil {
		return err
	}
	switch {
	case arm && s.syncTimer == nil:
		s.syncTimer = time.AfterFunc(doneSyncWithin, s.syncLater)
	case arm:
		s.syncTimer.Reset(doneSyncWithin)
	}
	switch kind {
	case recAccept:
		body = append([]byte(nil), body...) // the caller's buffer is not ours to keep
	case recAhead:
		body = nil // in the file already
	}
	s.pend.apply(kind, seq, at, key, body)
	return nil
}

// doneSyncWithin bounds how long a Done stays written but not synced. A Done follows the
// answer's delivery, and the next Accept (at any traffic worth the name, within tens of
// milliseconds) syncs it for free: one sync a message fewer, the largest cost of a message
// here. What it risks: a power cut (not a crash of the process: the write is in the page
// cache) within this window after an answer answers that message again after the restart.
// Accept, which gates the platform's acknowledgement, is synced before it returns.
const doneSyncWithin = 100 * time.Millisecond

// syncLater is the timer's: it syncs a Done no later record synced meanwhile.
func (s *DB) syncLater() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.log.unsynced {
		return
	}
	if err := s.log.sync(); err != nil {
		s.logger.Error("state: cannot sync the intake log; retrying", "err", err)
		s.syncTimer.Reset(doneSyncWithin)
	}
}

// keysPerCheckpoint bounds the dedup keys held in memory: a tenth of the window, the slack
// the window already allows, so the window's bound still holds.
func (s *DB) keysPerCheckpoint() int { return max(1, s.limits.DedupMax/10) }

// checkpoint applies what the log holds to bbolt in one commit that also moves to the next
// epoch, then starts the log again. Called with s.mu held.
func (s *DB) checkpoint() error {
	p := &s.pend
	if p.records == 0 {
		return nil
	}
	// The files' appends are durable only through this log's records until synced.
	if err := s.syncAhead(p.ahead); err != nil {
		return err
	}
	next := s.log.epoch + 1
	err := s.db.Update(func(tx *bolt.Tx) error {
		w := s.dedupWindow(tx)
		for _, k := range p.order {
			if err := w.put([]byte(k), time.Unix(0, p.keys[k])); err != nil {
				return err
			}
		}
		j, pl := tx.Bucket(bucketJournal), tx.Bucket(bucketPlaces)
		for seq := range p.dones {
			if err := j.Delete(seqKey(seq)); err != nil {
				return err
			}
			if err := pl.Delete(seqKey(seq)); err != nil {
				return err
			}
		}
		for seq, body := range p.accepts {
			if err := j.Put(seqKey(seq), body); err != nil {
				return err
			}
		}
		for seq, place := range p.places {
			// Only beside its message: a placement reported after its Done is no one's.
			if j.Get(seqKey(seq)) == nil {
				continue
			}
			if err := pl.Put(seqKey(seq), []byte(place)); err != nil {
				return err
			}
		}
		if p.lastSeq > j.Sequence() {
			if err := j.SetSequence(p.lastSeq); err != nil {
				return err
			}
		}
		c := tx.Bucket(bucketCursors)
		for name, v := range p.cursors {
			if err := c.Put([]byte(name), []byte(v)); err != nil {
				return err
			}
		}
		var e [8]byte
		binary.BigEndian.PutUint64(e[:], next)
		return c.Put(logEpochKey, e[:])
	})
	if err != nil {
		return err
	}
	s.log.epoch, s.log.off, s.log.unsynced = next, 0, false // bbolt's commit is synced
	s.pend = newPending(p.lastSeq)
	return nil
}

// openIntakeLog opens the log beside the state file and applies what it holds (a crash
// left it there) to bbolt. fresh says the state file was missing or empty: then the log
// is read in the epoch of its first record, so that what it holds (the messages taken
// since the last checkpoint, not yet answered) is not lost with the rest.
func (s *DB) openIntakeLog(dir string, fresh bool) error {
	var epoch, lastSeq uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketCursors).Get(logEpochKey); len(v) == 8 {
			epoch = binary.BigEndian.Uint64(v)
		}
		lastSeq = tx.Bucket(bucketJournal).Sequence()
		return nil
	})
	if err != nil {
		return err
	}
	l, found, err := openLog(filepath.Join(dir, LogName), s.limits.LogSize, s.logger)
	if err != nil {
		return err
	}
	e, hasRecords := l.firstEpoch()
	if hasRecords && fresh {
		epoch = e
	}
	s.log, s.pend = l, newPending(lastSeq)
	l.epoch = epoch
	if err = l.replay(epoch, &s.pend, s.restoreAhead, s.logger); err != nil {
		_ = l.f.Close()
		return err
	}
	recovered := len(s.pend.accepts)
	s.recovered = recovered
	if n := s.pend.records; n > 0 {
		if err := s.checkpoint(); err != nil {
			_ = l.f.Close()
			return err
		}
		s.logger.Info("state: applied the intake log left by the last run", "records", n, "history_appends_restored", s.aheadRestored)
	}
	statePath := filepath.Join(dir, FileName)
	switch {
	case fresh && hasRecords && !s.brokenAside: // Open says what a broken state file lost
		// A first start finds neither file, and the gateway never leaves the state file
		// empty: it was lost (deleted, emptied by a failed copy or restore).
		s.logger.Warn("state: the state file was missing or empty while the intake log beside it was not; "+
			"the state it held is lost (per-chat settings such as /voice, Slack threads followed, the record of "+
			"messages already answered, and unanswered messages taken before the log's last checkpoint); "+
			"the unanswered messages the intake log still held are answered",
			"file", statePath, "log", l.path, "recovered_messages", recovered)
	case !fresh && epoch > 0 && found < s.limits.LogSize:
		// The log is preallocated when created and never shrinks: one this short was cut,
		// or removed, since the state file was last written.
		what := "was truncated"
		if found < 0 {
			what = "is missing"
		}
		s.logger.Warn("state: the intake log "+what+"; messages taken since the state file was last "+
			"written may go unanswered, and some already answered may be answered again",
			"log", l.path, "bytes", max(found, 0), "file", statePath)
	}
	return nil
}
