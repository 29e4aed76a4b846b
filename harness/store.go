package harness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"gateway/internal/files"
	"gateway/internal/llm"
)

// The history file format (pi's session tree, one JSON object per line):
//
//	{"type":"session","version":1,"id":"…","timestamp":"…","key":"telegram:123"}        header, first line
//	{"type":"message","id":"a1","parentId":null,"timestamp":"…","message":{…}}           a message; parentId links the tree
//	{"type":"message","id":"b2","parentId":"a1","timestamp":"…","message":{…},"aborted":true}
//	{"type":"compaction","id":"c3","parentId":"b2","timestamp":"…","summary":"…","firstKeptEntryId":"b2","tokensBefore":91000}
//	{"type":"leaf","id":"d4","parentId":"c3","timestamp":"…","targetId":null}            a branch move
//	{"type":"message","id":"e5","parentId":null,"timestamp":"…","message":{…},"intakeId":"17"}   a user message the gateway journaled
//
// The active branch runs from the root to the leaf: the id of the last message or
// compaction entry, or the targetId of a later leaf entry. Reset (/new) appends a leaf
// entry with targetId null, so a new conversation starts at a new root in the same file and
// the old one stays on disk for audit. A compaction entry sits on the branch like a
// message: the model then sees its summary, the messages from firstKeptEntryId up to it,
// and the messages after it. Entries are only ever appended.
const (
	storeVersion = 1

	entrySession    = "session"
	entryMessage    = "message"
	entryLeaf       = "leaf"
	entryCompaction = "compaction"

	// maxPending bounds entries held in memory while saving keeps failing.
	maxPending = 16 << 20
)

// SessionStore keeps the sessions' histories: per session key, an append-only log of
// entries, one JSON object per line (the format above). *Store, JSONL files under
// state_dir, is the default; cluster mode keeps the logs in Postgres. A Session reads its
// key's log once when it opens and then only appends; at most one Session per key is open
// at a time. Implementations are safe for concurrent use across keys.
type SessionStore interface {
	// ReadLog returns key's log as written, oldest line first; nil when there is none.
	ReadLog(key string) ([]byte, error)
	// AppendLog appends lines (each ending in '\n') to key's log, durably and all or
	// nothing, before it returns. After Close it fails.
	AppendLog(key string, lines []byte) error
	// MoveLog gives from's log to to (a chat whose platform gave it a new id): after it
	// returns LogMoved, to's log is what from's was, its header naming to, and from has
	// none. It is all or nothing: a crash midway leaves the log whole under one key (or
	// under to, with from's copy not yet removed), never lost nor in to twice, and the call
	// made again completes it. When to already has a log of its own, both are left as they
	// are (LogKept); when from has none (never written, or moved before), nothing is done
	// (LogAbsent). Neither key may have a Session open meanwhile.
	MoveLog(from, to string) (LogMove, error)
	// Close ends the store; every append is already durable, so there is nothing to flush.
	Close() error
}

// LogMove is what MoveLog did.
type LogMove int

const (
	LogMoved  LogMove = iota + 1 // to holds the log from held
	LogAbsent                    // from had no log: nothing was done
	LogKept                      // to had a log of its own: both were left as they are
)

func (m LogMove) String() string {
	switch m {
	case LogMoved:
		return "moved"
	case LogAbsent:
		return "absent"
	case LogKept:
		return "kept"
	}
	return fmt.Sprintf("LogMove(%d)", int(m))
}

// Rekey is log with its header (the first line, when it is a session header) naming key:
// what a log moved to key holds. Anything else is returned as it is. The result is the
// same for the same input, so that a store can tell its own earlier copy.
func Rekey(log []byte, key string) []byte {
	first, rest, ok := bytes.Cut(log, []byte("\n"))
	if !ok {
		return log
	}
	var h map[string]json.RawMessage
	if json.Unmarshal(first, &h) != nil || string(h["type"]) != `"`+entrySession+`"` {
		return log
	}
	k, err := json.Marshal(key)
	if err != nil {
		return log
	}
	h["key"] = k
	line, err := json.Marshal(h) // keys sorted: the same bytes every time
	if err != nil {
		return log
	}
	out := make([]byte, 0, len(line)+1+len(rest))
	out = append(append(append(out, line...), '\n'), rest...)
	return out
}

var _ SessionStore = (*Store)(nil)

// Store keeps one JSONL history file per session key under a directory. Files are opened
// for each save point and closed again, so the store holds no descriptors between turns.
// At most one Session per key may be open at a time.
type Store struct {
	dir   string
	ahead WriteAhead

	mu     sync.Mutex
	closed bool
	// warned is, per history file, the damaged lines its last warning named: a chat loaded
	// again (after an idle eviction) warns only of new damage. At most maxWarned files.
	warned map[string]int
}

// maxWarned bounds Store.warned; past it the store forgets, and warns again.
const maxWarned = 1024

// newDamage reports whether path's bad damaged lines are more than the store last warned of.
func (s *Store) newDamage(path string, bad int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.warned[path] >= bad {
		return false
	}
	if s.warned == nil || len(s.warned) >= maxWarned {
		s.warned = map[string]int{}
	}
	s.warned[path] = bad
	return true
}

// WriteAhead makes an append durable in place of the file's own sync: the gateway's intake
// log (state.DB), which writes the bytes into an unsynced record that the next synced one
// makes durable, syncs the file before it lets the record go, and writes the bytes back
// into the file after a power cut. An error means nothing was recorded: the file is synced.
type WriteAhead interface {
	WriteAhead(path string, off int64, data []byte) error
}

// WriteAheadTo has the history files' appends made durable by w (see WriteAhead) rather
// than by a sync each. A file's first append, which creates it, and a tool step
// (flushSynced) are still synced. Call it
// before the store is used.
func (s *Store) WriteAheadTo(w WriteAhead) { s.ahead = w }

// OpenStore opens (creating) the store directory.
func OpenStore(dir string) (*Store, error) {
	if strings.TrimSpace(dir) == "" {
		return nil, errors.New("state_dir: the history directory is not set")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state_dir: cannot create %s: %w", dir, err)
	}
	dir, err := filepath.Abs(dir) // a write-ahead record names its file from the state directory
	if err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("state_dir: %s is not a directory", dir)
	}
	// A move's copy a crash left before its rename (writeSynced): the move is done again
	// from the original, so the copy is nobody's.
	if left, err := filepath.Glob(filepath.Join(dir, moveTemp)); err == nil {
		for _, p := range left {
			_ = os.Remove(p)
		}
	}
	return &Store{dir: dir}, nil
}

// Close ends the store: later saves fail. Every save is already durable when it returns
// (synced, or recorded by the WriteAhead, which keeps it), so there is nothing to flush.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// Dir is the store directory.
func (s *Store) Dir() string { return s.dir }

// Path returns the history file of a session key.
func (s *Store) Path(key string) (string, error) {
	name, err := FileName(key)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.dir, name), nil
}

// ReadLog reads key's history file (nil when there is none). Sessions of a *Store read
// the file directly; this serves tools and tests that want the raw log.
func (s *Store) ReadLog(key string) ([]byte, error) {
	p, err := s.Path(key)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// AppendLog appends lines to key's history file and fsyncs it.
func (s *Store) AppendLog(key string, lines []byte) error {
	if s.isClosed() {
		return errors.New("the history store is closed")
	}
	p, err := s.Path(key)
	if err != nil {
		return err
	}
	return appendDurable(p, lines)
}

// MoveLog gives from's history file to to (see SessionStore). The copy, its header naming
// to, is written and synced under a temporary name and renamed into place before from's
// file is removed, so a crash leaves from's file, or to's complete copy (with from's file
// still there: the next call sees its own copy and only removes it).
func (s *Store) MoveLog(from, to string) (LogMove, error) {
	if s.isClosed() {
		return 0, errors.New("the history store is closed")
	}
	src, err := s.Path(from)
	if err != nil {
		return 0, err
	}
	dst, err := s.Path(to)
	if err != nil {
		return 0, err
	}
	old, err := os.ReadFile(src)
	if errors.Is(err, os.ErrNotExist) {
		return LogAbsent, nil
	}
	if err != nil {
		return 0, err
	}
	moved := Rekey(old, to)
	cur, err := os.ReadFile(dst)
	switch {
	case errors.Is(err, os.ErrNotExist) || err == nil && len(cur) == 0:
		if err := writeSynced(dst, moved); err != nil {
			return 0, fmt.Errorf("moving the history of %s to %s: %w", from, to, err)
		}
	case err != nil:
		return 0, err
	case !bytes.HasPrefix(cur, moved):
		return LogKept, nil
	}
	// to holds the copy (written now, or by a call a crash cut): from's file goes.
	if err := os.Remove(src); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("removing the history of %s, moved to %s: %w", from, to, err)
	}
	syncDir(s.dir)
	return LogMoved, nil
}

// moveTemp names the copy of a log being moved, before its rename (a pattern: os.CreateTemp's).
const moveTemp = ".move-*"

// writeSynced puts data at path whole or not at all: written and synced under a temporary
// name, then renamed, the directory synced.
func writeSynced(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), moveTemp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing of that name is left
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	syncDir(filepath.Dir(path))
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// FileName turns a session key into a safe file name: characters other than letters,
// digits, '-', '_' and '.' become '_', a leading '.' is replaced, the readable part is
// bounded, and a hash of the whole key keeps distinct keys in distinct files.
func FileName(key string) (string, error) {
	if key == "" {
		return "", errors.New("session key is empty")
	}
	var b strings.Builder
	for _, r := range key {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 80 {
			break
		}
	}
	readable := b.String()
	if strings.HasPrefix(readable, ".") {
		readable = "_" + readable[1:]
	}
	sum := sha256.Sum256([]byte(key))
	name := readable + "-" + hex.EncodeToString(sum[:6]) + ".jsonl"
	if !filepath.IsLocal(name) || strings.ContainsAny(name, `/\`) {
		return "", fmt.Errorf("session key %q does not make a safe file name", key)
	}
	return name, nil
}

// newID returns a random 16-hex-digit id.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func nowStamp() string { return stamp(time.Now()) }

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

type headerEntry struct {
	Type      string `json:"type"`
	Version   int    `json:"version"`
	ID        string `json:"id"`
	Timestamp string `json:"timestamp"`
	Key       string `json:"key"`
}

type messageEntry struct {
	Type      string      `json:"type"`
	ID        string      `json:"id"`
	ParentID  *string     `json:"parentId"`
	Timestamp string      `json:"timestamp"`
	Message   llm.Message `json:"message"`
	Aborted   bool        `json:"aborted,omitempty"`
	// IntakeID names the user message the entry is (Attempt.ID), so that the message
	// answered again after a crash takes its earlier attempt back.
	IntakeID string `json:"intakeId,omitempty"`
}

type leafEntry struct {
	Type      string  `json:"type"`
	ID        string  `json:"id"`
	ParentID  *string `json:"parentId"`
	Timestamp string  `json:"timestamp"`
	TargetID  *string `json:"targetId"`
}

// compactionEntry is pi's compaction entry; its fields are a documented contract.
type compactionEntry struct {
	Type             string  `json:"type"`
	ID               string  `json:"id"`
	ParentID         *string `json:"parentId"`
	Timestamp        string  `json:"timestamp"`
	Summary          string  `json:"summary"`
	FirstKeptEntryID string  `json:"firstKeptEntryId"`
	TokensBefore     int     `json:"tokensBefore"`
	FromHook         bool    `json:"fromHook,omitempty"`
}

// entryHead is what loading needs of any line; decoding it validates the whole line.
type entryHead struct {
	Type      string  `json:"type"`
	ID        string  `json:"id"`
	ParentID  *string `json:"parentId"`
	TargetID  *string `json:"targetId"`
	FirstKept string  `json:"firstKeptEntryId"`
	Timestamp string  `json:"timestamp"`
	Key       string  `json:"key"`
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// entry is a message of the active branch that the model may see.
type entry struct {
	id      string
	parent  *string // as in the file: the hooks' entries are its form
	stamp   string
	aborted bool
	intake  string // Attempt.ID of a user message
	msg     llm.Message
	tokens  int // estimate
}

// customEntry is an entry of a type the core does not use, kept as it is in the file.
type customEntry struct {
	at  int
	raw json.RawMessage
}

// compactionInfo describes the latest compaction on the active branch.
type compactionInfo struct {
	At           time.Time
	TokensBefore int
	FromHook     bool
}

// history is one session's conversation: what the model may see of the active branch (the
// latest compaction's summary and the messages after its cut) in memory, and the entries
// not yet written. It is used by one goroutine at a time (the session's runner).
type history struct {
	store SessionStore // nil: memory only
	files *Store       // store, when it is the JSONL directory: the file is read and appended directly
	key   string
	path  string
	log   *slog.Logger

	leaf    string  // id of the active branch's last entry, "" at a root
	total   int     // messages on the active branch, compacted ones included
	entries []entry // the messages after the latest compaction's cut, oldest first
	summary string  // the latest compaction's summary, "" if none
	last    compactionInfo
	// firstKept is the latest compaction's firstKeptEntryId ("" when it kept nothing).
	firstKept string
	// maxTokens bounds the entries held in memory (a chat whose compactions hooks keep
	// cancelling); older ones could never be sent anyway.
	maxTokens int
	held      int       // sum of entries' tokens
	cost      mediaCost // how an entry's media are counted

	// reported is the provider's usage (input + output) for the request that ended at
	// entries[reportedAt-1]; 0 when unknown or stale.
	reported, reportedAt int
	// lastActivity is when the last entry was written (idle_reset).
	lastActivity time.Time

	// custom are the custom entries (hooks' own types) on the branch, each placed before
	// entries[at] (at == len(entries): after the last message).
	custom []customEntry

	pending bytes.Buffer // encoded lines waiting for the next save point

	f    *os.File // the history file, open during a run (see flush)
	size int64    // its size while open
}

// open loads the active branch of key's history, repairing a torn last line. maxTokens
// bounds what is held in memory.
func (s *Store) open(key string, maxTokens int, log *slog.Logger) (*history, error) {
	return openHistory(s, key, maxTokens, mediaCost{}, log)
}

// openHistory is open for any SessionStore; a nil store (or nil *Store) keeps the history
// in memory only. cost is how the session's requests carry media.
func openHistory(s SessionStore, key string, maxTokens int, cost mediaCost, log *slog.Logger) (*history, error) {
	h := &history{key: key, log: log, maxTokens: max(maxTokens, 4096), cost: cost}
	if fs, ok := s.(*Store); ok {
		if fs == nil {
			return h, nil
		}
		p, err := fs.Path(key)
		if err != nil {
			return nil, err
		}
		h.files, h.path = fs, p
	} else if s == nil {
		return h, nil
	} else if key == "" {
		return nil, errors.New("session key is empty")
	}
	h.store = s
	if err := h.load(); err != nil {
		return nil, fmt.Errorf("history of %s: %w", key, err)
	}
	return h, nil
}

type indexNode struct {
	parent     string
	off        int64
	n          int
	line       int
	compaction bool
	custom     bool
	firstKept  string
}

// badLine is a line of a history file that is not an entry: where it is, and the active
// leaf just before it (the parent the lost entry most likely had: entries are appended
// with the leaf of their time as parent).
type badLine struct {
	line int
	off  int64
	leaf string
}

// tornTail reports whether line, the file's last and without its newline, is what a
// crash mid-write leaves: the start of a JSON object, or nothing (a power cut can leave
// zeros where the write did not land). Anything else is damage of another kind, kept.
func tornTail(line []byte) bool {
	t := bytes.TrimRight(line, "\x00 \t\r")
	return len(t) == 0 || t[0] == '{'
}

// logReader is what load reads: the history file, or a log store's bytes.
type logReader interface {
	io.Reader
	io.ReaderAt
}

func (h *history) load() error {
	var f logReader
	closeF := func() {}
	if h.files != nil {
		file, err := os.Open(h.path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer file.Close()
		f, closeF = file, func() { file.Close() }
	} else {
		data, err := h.store.ReadLog(h.key)
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return nil
		}
		h.size = int64(len(data))
		f = bytes.NewReader(data)
	}

	index := map[string]indexNode{}
	var (
		r          = bufio.NewReaderSize(f, 64<<10)
		off        int64
		lineNo     int
		truncateAt = int64(-1)
		addNewline bool
		bad        []badLine
		good       int
		leaf       string
		leafOff    int64 // offset of the line that set leaf
		stamp      string
	)
	for {
		line, rerr := r.ReadBytes('\n')
		if len(line) == 0 && rerr == io.EOF {
			break
		}
		if rerr != nil && rerr != io.EOF {
			return rerr
		}
		lineNo++
		var e entryHead
		if err := json.Unmarshal(bytes.TrimSpace(line), &e); err != nil || e.Type == "" {
			if rerr == io.EOF && tornTail(line) {
				// The last line was cut by a crash mid-write (only a write's end can be
				// missing, with its newline): drop it.
				truncateAt = off
				break
			}
			// Damage of another kind: the line is skipped and kept in the file, and the
			// entries around it are read (see the walk below).
			bad = append(bad, badLine{line: lineNo, off: off, leaf: leaf})
			if rerr == io.EOF {
				addNewline = true // the next append starts on a line of its own
			}
			off += int64(len(line))
			continue
		}
		good++
		if rerr == io.EOF {
			// Complete JSON that lost only its newline: keep it, end the line.
			addNewline = true
		}
		if e.Timestamp != "" {
			stamp = e.Timestamp
		}
		switch e.Type {
		case entrySession:
			if lineNo == 1 && e.Key != "" && e.Key != h.key {
				h.log.Warn("session history header names another key", "key", h.key, "file_key", e.Key)
			}
		case entryMessage, entryCompaction:
			if e.ID != "" {
				p := ""
				if e.ParentID != nil {
					p = *e.ParentID
				}
				index[e.ID] = indexNode{parent: p, off: off, n: len(line), line: lineNo, compaction: e.Type == entryCompaction, firstKept: e.FirstKept}
				leaf, leafOff = e.ID, off
			}
		case entryLeaf:
			leaf, leafOff = "", off
			if e.TargetID != nil {
				leaf = *e.TargetID
			}
		default: // a custom entry: on the branch, seen by hooks, not by the model
			if e.ID != "" {
				p := ""
				if e.ParentID != nil {
					p = *e.ParentID
				}
				index[e.ID] = indexNode{parent: p, off: off, n: len(line), line: lineNo, custom: true}
				leaf, leafOff = e.ID, off
			}
		}
		off += int64(len(line))
	}
	if good == 0 && len(bad) > 0 {
		// Not one line is an entry: this is not a history with a torn end but something
		// else in its place. It is kept for the admin, and the chat starts afresh.
		closeF()
		return h.setAside(lineNo)
	}
	if len(bad) > 0 {
		var nums []int // the first few name the place; count says how many
		for _, b := range bad[:min(len(bad), 20)] {
			nums = append(nums, b.line)
		}
		level := slog.LevelWarn
		if h.files != nil && !h.files.newDamage(h.path, len(bad)) {
			level = slog.LevelDebug // warned of already, when the chat was loaded before
		}
		h.log.Log(context.Background(), level, "session history: skipped lines that are not history entries (damaged file?); the entries before and after them are kept",
			"key", h.key, "file", h.path, "lines", nums, "count", len(bad))
	}
	if t, err := time.Parse(time.RFC3339Nano, stamp); err == nil {
		h.lastActivity = t
	}

	// Walk the active branch back from the leaf. Only what the model may see is decoded:
	// the messages after the latest compaction, those it kept, and its summary.
	var (
		need       []indexNode // newest first
		comp       *indexNode
		collecting = true
		heldBytes  int
		dropped    bool
	)
	from := leafOff // offset of the line whose parent is id
	for id, steps := leaf, 0; id != "" && steps <= len(index)+len(bad); steps++ {
		n, ok := index[id]
		if !ok {
			// An entry lost to a damaged line: the branch goes on from the leaf as it was
			// before that line (the parent it was appended to), so one bad line does not
			// cut off the conversation before it. A lost tool call or result leaves the
			// other half unpaired, which repair mends before the model sees it.
			if b := lastBadBefore(bad, from); b != nil {
				id, from = b.leaf, b.off
				continue
			}
			if steps == 0 {
				h.log.Warn("session history: leaf points to a missing entry; starting fresh", "key", h.key)
			}
			break
		}
		from = n.off
		if n.custom {
			if collecting {
				need = append(need, n)
				heldBytes += n.n
			}
			id = n.parent
			continue
		}
		if n.compaction {
			if comp == nil {
				c := n
				comp = &c
				collecting = collecting && n.firstKept != ""
			}
			id = n.parent
			continue
		}
		h.total++
		if collecting {
			if heldBytes+n.n > 4*h.maxTokens && len(need) > 0 {
				collecting, dropped = false, true
			} else {
				need = append(need, n)
				heldBytes += n.n
				if comp != nil && id == comp.firstKept {
					collecting = false
				}
			}
		}
		id = n.parent
	}
	if dropped {
		h.log.Warn("session history: the branch is longer than the model could ever see; only its newest part is loaded", "key", h.key)
	}
	h.leaf = leaf
	if h.total == 0 && comp == nil && len(need) == 0 {
		h.leaf = ""
	}
	h.entries = make([]entry, 0, len(need))
	buf := make([]byte, 0, 4096)
	for i := len(need) - 1; i >= 0; i-- {
		n := need[i]
		buf = growBuf(buf, n.n)
		if _, err := f.ReadAt(buf, n.off); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if n.custom {
			h.custom = append(h.custom, customEntry{at: len(h.entries), raw: json.RawMessage(bytes.Clone(bytes.TrimSpace(buf)))})
			continue
		}
		var e messageEntry
		if err := json.Unmarshal(bytes.TrimSpace(buf), &e); err != nil {
			// JSON, but not a message (a field of the wrong type): skipped like a bad line.
			h.log.Warn("session history: skipped a message entry that cannot be read; the entries before and after it are kept",
				"key", h.key, "file", h.path, "line", n.line, "err", err)
			continue
		}
		h.push(entry{id: e.ID, parent: e.ParentID, stamp: e.Timestamp, aborted: e.Aborted, intake: e.IntakeID, msg: e.Message, tokens: estimateMessage(e.Message, h.cost)})
	}
	if comp != nil {
		buf = growBuf(buf, comp.n)
		if _, err := f.ReadAt(buf, comp.off); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		var c compactionEntry
		if err := json.Unmarshal(bytes.TrimSpace(buf), &c); err != nil {
			h.log.Warn("session history: skipped a compaction entry that cannot be read; the messages it kept are still seen",
				"key", h.key, "file", h.path, "line", comp.line, "err", err)
		} else {
			h.summary, h.firstKept = c.Summary, c.FirstKeptEntryID
			h.last = compactionInfo{TokensBefore: c.TokensBefore, FromHook: c.FromHook}
			h.last.At, _ = time.Parse(time.RFC3339Nano, c.Timestamp)
		}
	}
	closeF()

	switch {
	case h.files == nil && truncateAt >= 0:
		// A log store appends all or nothing, so this is not a crash mid-write; the line
		// stays in the log and is skipped on every load.
		h.log.Warn("session history: the last entry is unreadable; skipped it", "key", h.key)
	case h.files == nil && addNewline:
		h.size++
		if err := h.store.AppendLog(h.key, []byte("\n")); err != nil {
			return fmt.Errorf("repairing the last line: %w", err)
		}
	case truncateAt >= 0:
		fi, _ := os.Stat(h.path)
		var size int64
		if fi != nil {
			size = fi.Size()
		}
		if err := os.Truncate(h.path, truncateAt); err != nil {
			return fmt.Errorf("repairing a torn last line: %w", err)
		}
		h.log.Warn("session history had a torn last line (crash mid-write); dropped it",
			"key", h.key, "bytes", size-truncateAt)
	case addNewline:
		if err := appendDurable(h.path, []byte("\n")); err != nil {
			return fmt.Errorf("repairing the last line: %w", err)
		}
	}
	return nil
}

// lastBadBefore is the last bad line before offset off, nil if none: the one most likely
// to have held the entry a line at off names as its parent (parents precede children).
func lastBadBefore(bad []badLine, off int64) *badLine {
	for i := len(bad) - 1; i >= 0; i-- {
		if bad[i].off < off {
			return &bad[i]
		}
	}
	return nil
}

// setAside moves a history file that holds no entry at all to NAME.corrupt-<time> beside
// it, so the chat starts afresh without destroying what was there. A log store (cluster)
// cannot move its log: the lines are skipped on every load and new entries follow them.
func (h *history) setAside(lines int) error {
	if h.files == nil {
		h.log.Error("session history: not one line of the log is a history entry; the chat starts a new conversation after them",
			"key", h.key, "lines", lines)
		return nil
	}
	aside := h.path + ".corrupt-" + time.Now().UTC().Format("20060102T150405.000000000")
	if err := os.Rename(h.path, aside); err != nil {
		return fmt.Errorf("the file holds no history entry and cannot be moved aside: %w", err)
	}
	syncDir(filepath.Dir(h.path))
	h.log.Error("session history: the file holds no history entry (not one of its lines could be read), so it is not a crash's torn end; "+
		"it was moved aside, untouched, and the chat starts a new conversation",
		"key", h.key, "file", h.path, "kept_as", aside, "lines", lines)
	return nil
}

// growBuf returns buf resized to n bytes, reusing its storage when it can.
func growBuf(buf []byte, n int) []byte {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]byte, n)
}

// push appends an entry in memory.
func (h *history) push(e entry) {
	h.entries = append(h.entries, e)
	h.held += e.tokens
}

// add appends a message to the active branch (written at the next save point).
func (h *history) add(m llm.Message, aborted bool) { h.addAs(m, aborted, "") }

// addAs is add for the user message intake names (Attempt.ID; "" for none).
func (h *history) addAs(m llm.Message, aborted bool, intake string) {
	for i := range m.ToolCalls {
		m.ToolCalls[i].Arguments = argsOrEmpty(m.ToolCalls[i].Arguments)
	}
	id := newID()
	now := time.Now()
	e := messageEntry{Type: entryMessage, ID: id, ParentID: strPtr(h.leaf), Timestamp: stamp(now), Message: m, Aborted: aborted, IntakeID: intake}
	h.encode(e)
	h.leaf = id
	h.total++
	h.lastActivity = now
	h.push(entry{id: id, parent: e.ParentID, stamp: e.Timestamp, aborted: aborted, intake: intake, msg: m, tokens: estimateMessage(m, h.cost)})
	if h.held > 2*h.maxTokens {
		// Compaction keeps being refused: let go of what could never be sent.
		h.drop(cutPoint(h.entries, h.maxTokens))
	}
}

// drop forgets the first n entries in memory (they stay in the file), in a fresh array.
func (h *history) drop(n int) {
	if n <= 0 {
		return
	}
	h.entries = append(make([]entry, 0, len(h.entries)-n+8), h.entries[n:]...)
	for i := range h.custom {
		h.custom[i].at = max(h.custom[i].at-n, 0)
	}
	h.held = 0
	for _, e := range h.entries {
		h.held += e.tokens
	}
	h.reported, h.reportedAt = 0, 0
}

// compact appends a compaction entry: the model will see summary, then the entries from
// cut on. It is written at the next save point.
func (h *history) compact(summary string, cut, tokensBefore int, fromHook bool) string {
	id, now := newID(), time.Now()
	firstKept := ""
	if cut < len(h.entries) {
		firstKept = h.entries[cut].id
	}
	h.encode(compactionEntry{Type: entryCompaction, ID: id, ParentID: strPtr(h.leaf), Timestamp: stamp(now),
		Summary: summary, FirstKeptEntryID: firstKept, TokensBefore: tokensBefore, FromHook: fromHook})
	h.leaf = id
	h.lastActivity = now
	h.summary, h.firstKept = summary, firstKept
	h.last = compactionInfo{At: now, TokensBefore: tokensBefore, FromHook: fromHook}
	h.drop(cut)
	return firstKept
}

// addCustom appends custom entries to the active branch (written at the next save point):
// each gets an id, its parent and a timestamp; its other fields are kept.
func (h *history) addCustom(entries []json.RawMessage) error {
	type stamped struct {
		ID        string  `json:"id"`
		ParentID  *string `json:"parentId"`
		Timestamp string  `json:"timestamp"`
	}
	var lines []json.RawMessage
	leaf := h.leaf
	for i, e := range entries {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(e, &fields); err != nil || fields == nil {
			return fmt.Errorf("entry %d is not a JSON object", i)
		}
		var typ string
		if json.Unmarshal(fields["type"], &typ) != nil || typ == "" ||
			typ == entrySession || typ == entryMessage || typ == entryLeaf || typ == entryCompaction {
			return fmt.Errorf("entry %d: its type must be a name the history does not use", i)
		}
		id := newID()
		st, _ := json.Marshal(stamped{ID: id, ParentID: strPtr(leaf), Timestamp: nowStamp()})
		var own map[string]json.RawMessage
		_ = json.Unmarshal(st, &own)
		for k, v := range own {
			fields[k] = v
		}
		b, err := json.Marshal(fields)
		if err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		lines = append(lines, b)
		leaf = id
	}
	for _, b := range lines {
		if h.store != nil {
			h.pending.Write(b)
			h.pending.WriteByte('\n')
		}
		h.custom = append(h.custom, customEntry{at: len(h.entries), raw: b})
	}
	if len(lines) > 0 {
		h.leaf = leaf
		h.lastActivity = time.Now()
	}
	return nil
}

// branch returns the entries behind what the model sees, in the file's form and in order:
// the latest compaction (its summary), the messages after its cut and the custom entries.
func (h *history) branch() []json.RawMessage {
	out := make([]json.RawMessage, 0, len(h.entries)+len(h.custom)+1)
	if h.summary != "" {
		b, _ := json.Marshal(map[string]string{"type": entryCompaction, "summary": h.summary})
		out = append(out, b)
	}
	c := 0
	for i, e := range h.entries {
		for ; c < len(h.custom) && h.custom[c].at <= i; c++ {
			out = append(out, h.custom[c].raw)
		}
		b, err := json.Marshal(messageEntry{Type: entryMessage, ID: e.id, ParentID: e.parent, Timestamp: e.stamp, Message: e.msg, Aborted: e.aborted, IntakeID: e.intake})
		if err == nil {
			out = append(out, b)
		}
	}
	for ; c < len(h.custom); c++ {
		out = append(out, h.custom[c].raw)
	}
	return out
}

// takeBack moves the branch back to before the user message intake names, when it is on
// the branch after the latest compaction (written at the next save point): that message
// and what followed it (an answer cut by a crash, tool steps) leave the branch and stay in
// the file. It reports whether it found the message.
func (h *history) takeBack(intake string) bool {
	i := slices.IndexFunc(h.entries, func(e entry) bool { return e.intake == intake && e.msg.Role == llm.RoleUser })
	return i >= 0 && h.takeBackAt(i)
}

// takeBackResent takes back the branch's last user message, when it got no answer (its
// run failed or was stopped, before a word or with an answer cut midway) and m is the same
// message again: the user did as told and sent it again, and the model is asked it once,
// not twice. It reports whether it did.
func (h *history) takeBackResent(m llm.Message) bool {
	n := len(h.entries)
	for n > 0 && h.entries[n-1].aborted && h.entries[n-1].msg.Role == llm.RoleAssistant && len(h.entries[n-1].msg.ToolCalls) == 0 {
		n-- // a cut answer: text only, nothing done
	}
	if n == 0 {
		return false
	}
	last := h.entries[n-1].msg
	if last.Role != llm.RoleUser || last.Content != m.Content || len(last.Parts) != len(m.Parts) {
		return false
	}
	for i, p := range last.Parts {
		q := m.Parts[i]
		if p.Type != q.Type || p.Name != q.Name || p.MIME != q.MIME || p.Size != q.Size {
			return false
		}
	}
	return h.takeBackAt(n - 1)
}

// takeBackAt moves the branch back to before entries[i] (see takeBack).
func (h *history) takeBackAt(i int) bool {
	target := h.entries[i].parent
	if at, err := time.Parse(time.RFC3339Nano, h.entries[i].stamp); err == nil && !h.last.At.IsZero() && at.Before(h.last.At) {
		// The latest compaction came after it (during its run, which the compaction kept
		// verbatim: the summary tells of what came before it only). A branch move to before
		// it would leave the compaction, and its summary, behind: the compaction is written
		// again where the branch goes on, keeping what it kept up to there. Refused, the
		// earlier attempt had to stay, and the model read the message twice.
		firstKept := h.firstKept
		if firstKept == h.entries[i].id {
			firstKept = "" // it kept nothing before the message
		}
		id, now := newID(), time.Now()
		h.encode(compactionEntry{Type: entryCompaction, ID: id, ParentID: target, Timestamp: stamp(now),
			Summary: h.summary, FirstKeptEntryID: firstKept, TokensBefore: h.last.TokensBefore, FromHook: h.last.FromHook})
		h.leaf, h.firstKept, h.last.At = id, firstKept, now
	} else {
		h.encode(leafEntry{Type: entryLeaf, ID: newID(), ParentID: strPtr(h.leaf), Timestamp: nowStamp(), TargetID: target})
		h.leaf = ""
		if target != nil {
			h.leaf = *target
		}
	}
	for _, e := range h.entries[i:] {
		h.held -= e.tokens
	}
	h.total -= len(h.entries) - i
	clear(h.entries[i:])
	h.entries = h.entries[:i]
	// Custom entries placed after the message left the branch with it.
	h.custom = slices.DeleteFunc(h.custom, func(c customEntry) bool { return c.at > i })
	if h.reportedAt > i {
		h.reported, h.reportedAt = 0, 0
	}
	return true
}

// reset starts a new root: the next message has no parent.
func (h *history) reset() {
	h.encode(leafEntry{Type: entryLeaf, ID: newID(), ParentID: strPtr(h.leaf), Timestamp: nowStamp(), TargetID: nil})
	h.leaf = ""
	h.total = 0
	h.entries, h.held = nil, 0
	h.custom = nil
	h.summary, h.last, h.firstKept = "", compactionInfo{}, ""
	h.reported, h.reportedAt = 0, 0
	h.lastActivity = time.Now()
}

// tokens is the estimate of a request with the whole context: fixed is what the system
// prompt and tools cost. The provider's reported usage counts for what it saw.
func (h *history) tokens(fixed int) int {
	if h.reported > 0 && h.reportedAt <= len(h.entries) {
		n := h.reported
		for _, e := range h.entries[h.reportedAt:] {
			n += e.tokens
		}
		return n
	}
	return fixed + h.tokensFrom(0)
}

// tokensFrom estimates the summary and the entries from start on.
func (h *history) tokensFrom(start int) int {
	n := 0
	if h.summary != "" {
		n += estimateText(h.summary) + summaryOverhead
	}
	if start == 0 {
		return n + h.held
	}
	for _, e := range h.entries[start:] {
		n += e.tokens
	}
	return n
}

// context is what the model sees: the summary, then the entries from start on, repaired
// into a valid sequence.
func (h *history) context(start int) []llm.Message {
	msgs := make([]llm.Message, 0, len(h.entries)-start+1)
	if h.summary != "" {
		msgs = append(msgs, summaryMessage(h.summary))
	}
	for _, e := range h.entries[start:] {
		msgs = append(msgs, e.msg)
	}
	return repair(msgs)
}

func (h *history) encode(v any) {
	if h.store == nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Only unencodable values get here; losing the line beats corrupting the file.
		h.log.Error("session history: cannot encode an entry", "key", h.key, "err", err)
		return
	}
	h.pending.Write(b)
	h.pending.WriteByte('\n')
}

// flush is a save point: pending entries are written and fsynced in one append. On
// failure the file is cut back to where it was, and the entries stay pending.
//
// The file stays open from the first save point of a run to its end (release), so that
// a save point costs a write and an fsync, not also an open, two stats and a close.
func (h *history) flush() error { return h.flushAs(false) }

// flushSynced is a save point whose entries are synced before it returns, never left to
// the intake log's lazy sync (WriteAhead): a tool step, saved before its tools run, must
// not be lost to a power cut after a tool did its work, or the tool runs again.
func (h *history) flushSynced() error { return h.flushAs(true) }

func (h *history) flushAs(synced bool) error {
	if h.store == nil || h.pending.Len() == 0 {
		return nil
	}
	if h.files != nil && h.files.isClosed() {
		return errors.New("the history store is closed")
	}
	if err := h.appendPending(synced); err != nil {
		if h.pending.Len() > maxPending {
			// The disk has refused writes for a long while: stop holding the backlog.
			h.log.Error("session history: dropping unsaved entries", "key", h.key, "bytes", h.pending.Len())
			h.pending.Reset()
		}
		return err
	}
	h.pending.Reset()
	return nil
}

func (h *history) appendPending(synced bool) error {
	if h.files == nil {
		data := h.pending.Bytes()
		if h.size == 0 {
			data = append(h.header(), data...)
		}
		if err := h.store.AppendLog(h.key, data); err != nil {
			return err
		}
		h.size += int64(len(data))
		return nil
	}
	if h.f == nil {
		f, err := files.OpenAppend(h.path)
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		h.f, h.size = f, fi.Size()
	}
	data := h.pending.Bytes()
	if h.size == 0 {
		data = append(h.header(), data...)
	}
	_, err := h.f.Write(data)
	if err == nil && (h.size == 0 || synced || h.files.ahead == nil || h.files.ahead.WriteAhead(h.path, h.size, data) != nil) {
		err = h.f.Sync()
	}
	if err != nil {
		// No torn or unsynced line is left to be written twice by the next attempt.
		_ = h.f.Truncate(h.size)
		h.release()
		return err
	}
	if h.size == 0 {
		syncDir(filepath.Dir(h.path))
	}
	h.size += int64(len(data))
	return nil
}

// header is the log's first line.
func (h *history) header() []byte {
	b, _ := json.Marshal(headerEntry{Type: entrySession, Version: storeVersion, ID: newID() + newID(), Timestamp: nowStamp(), Key: h.key})
	return append(b, '\n')
}

// release closes the history file between runs: the store holds no descriptors then.
func (h *history) release() {
	if h.f != nil {
		_ = h.f.Close()
		h.f = nil
	}
}

// syncDir makes a new file's directory entry durable.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// appendDurable appends data to the file at path and fsyncs it; a new file's directory
// entry is fsynced too. A failed write is cut back so that no torn line is left behind.
func appendDurable(path string, data []byte) error {
	f, err := files.OpenAppend(path)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	size := fi.Size()
	if _, err := f.Write(data); err != nil {
		_ = f.Truncate(size)
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if size == 0 {
		syncDir(filepath.Dir(path))
	}
	return nil
}
