package state

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrDuplicate is returned by Accept for a dedup key seen within the window.
var ErrDuplicate = errors.New("already accepted")

// Entry is one journaled message: accepted, not yet answered.
type Entry struct {
	Seq  uint64
	Body []byte // the message as the gateway encoded it
	// Place is where its answer showed when the process stopped (Place's last), "" when
	// no answer was under way.
	Place string
}

// Journal is what intake needs: accept durably (deduplicated), list what is unanswered,
// and let go of what was answered.
type Journal interface {
	Accept(dedupKey string, body []byte) (uint64, error)
	Done(seq uint64) error
	Pending() ([]Entry, error)
}

// Accept stores body in the journal and remembers dedupKey, in one synced record of the
// intake log. An empty dedupKey is not deduplicated. A key seen within the window is
// ErrDuplicate and stores nothing. The returned sequence number orders entries and is
// passed to Done.
func (s *DB) Accept(dedupKey string, body []byte) (uint64, error) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if dedupKey != "" {
		if at, ok := s.pend.keys[dedupKey]; ok && now.Sub(time.Unix(0, at)) < s.limits.DedupAge {
			return 0, ErrDuplicate
		}
		var seen bool
		if err := s.db.View(func(tx *bolt.Tx) error {
			seen = s.dedupWindow(tx).seen([]byte(dedupKey), now)
			return nil
		}); err != nil {
			return 0, fmt.Errorf("state: cannot journal the message: %w", err)
		}
		if seen {
			return 0, ErrDuplicate
		}
	}
	seq := s.pend.lastSeq + 1
	if err := s.record(recAccept, seq, now.UnixNano(), dedupKey, body); err != nil {
		return 0, fmt.Errorf("state: cannot journal the message: %w", err)
	}
	return seq, nil
}

var dedupCountKey = []byte("\x00dedup_count") // no cursor name starts with NUL

// dedupWindow is the window of platform message ids: bounded by count and age.
func (s *DB) dedupWindow(tx *bolt.Tx) window {
	return window{b: tx.Bucket(bucketDedup), counts: tx.Bucket(bucketCursors), countKey: dedupCountKey,
		max: s.limits.DedupMax, age: s.limits.DedupAge}
}

// Done removes an answered message from the journal, in one record of the intake log,
// synced with the next write or within doneSyncWithin. Unknown seqs are ignored.
func (s *DB) Done(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.record(recDone, seq, 0, "", nil); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

// Place records where the answer to the journaled message seq shows so far (a
// channel's placement: its message ids), so that an answer cut by a crash is finished in
// those messages after the restart rather than beside them. Like Done it is one record of
// the intake log, synced with the next write or within doneSyncWithin: a crash of the
// process keeps it. It leaves with the message's Done; one for a seq not journaled is
// ignored.
func (s *DB) Place(seq uint64, placement string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.record(recPlace, seq, 0, "", []byte(placement)); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

// Pending lists the journal in acceptance order.
func (s *DB) Pending() ([]Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		places := tx.Bucket(bucketPlaces)
		return tx.Bucket(bucketJournal).ForEach(func(k, v []byte) error {
			seq := binary.BigEndian.Uint64(k)
			if _, done := s.pend.dones[seq]; !done {
				out = append(out, Entry{Seq: seq, Body: append([]byte(nil), v...), Place: string(places.Get(k))})
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	for i, e := range out {
		if place, ok := s.pend.places[e.Seq]; ok {
			out[i].Place = place
		}
	}
	// This epoch's seqs all follow those bbolt holds.
	fresh := make([]Entry, 0, len(s.pend.accepts))
	for seq, body := range s.pend.accepts {
		fresh = append(fresh, Entry{Seq: seq, Body: append([]byte(nil), body...), Place: s.pend.places[seq]})
	}
	slices.SortFunc(fresh, func(a, b Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	return append(out, fresh...), nil
}
