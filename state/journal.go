package state

import (
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// ErrDuplicate is returned by Accept for a dedup key seen within the window.
var ErrDuplicate = errors.New("already accepted")

// Entry is one journaled message: accepted, not yet answered.
type Entry struct {
	Seq  uint64
	Body []byte // the message as the gateway encoded it
}

// Journal is what intake needs: accept durably (deduplicated), list what is unanswered,
// and let go of what was answered.
type Journal interface {
	Accept(dedupKey string, body []byte) (uint64, error)
	Done(seq uint64) error
	Pending() ([]Entry, error)
}

// Accept stores body in the journal and remembers dedupKey, in one fsynced transaction.
// An empty dedupKey is not deduplicated. A key seen within the window is ErrDuplicate and
// stores nothing. The returned sequence number orders entries and is passed to Done.
func (s *DB) Accept(dedupKey string, body []byte) (uint64, error) {
	var seq uint64
	now := s.now()
	err := s.db.Update(func(tx *bolt.Tx) error {
		if dedupKey != "" {
			w := s.dedupWindow(tx)
			if w.seen([]byte(dedupKey), now) {
				return ErrDuplicate
			}
			if err := w.put([]byte(dedupKey), now); err != nil {
				return err
			}
		}
		j := tx.Bucket(bucketJournal)
		var err error
		if seq, err = j.NextSequence(); err != nil {
			return err
		}
		return j.Put(seqKey(seq), body)
	})
	if err != nil && !errors.Is(err, ErrDuplicate) {
		return 0, fmt.Errorf("state: cannot journal the message: %w", err)
	}
	return seq, err
}

var dedupCountKey = []byte("\x00dedup_count") // no cursor name starts with NUL

// dedupWindow is the window of platform message ids: bounded by count and age.
func (s *DB) dedupWindow(tx *bolt.Tx) window {
	return window{b: tx.Bucket(bucketDedup), counts: tx.Bucket(bucketCursors), countKey: dedupCountKey,
		max: s.limits.DedupMax, age: s.limits.DedupAge}
}

// Done removes an answered message from the journal. Unknown seqs are ignored.
func (s *DB) Done(seq uint64) error {
	err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketJournal).Delete(seqKey(seq)) })
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

// Pending lists the journal in acceptance order.
func (s *DB) Pending() ([]Entry, error) {
	var out []Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJournal).ForEach(func(k, v []byte) error {
			out = append(out, Entry{Seq: binary.BigEndian.Uint64(k), Body: append([]byte(nil), v...)})
			return nil
		})
	})
	return out, err
}
