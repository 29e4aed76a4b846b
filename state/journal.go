package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

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
		dd := tx.Bucket(bucketDedup)
		if dedupKey != "" {
			if v := dd.Get([]byte(dedupKey)); v != nil && now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(v)))) < s.limits.DedupAge {
				return ErrDuplicate
			}
			fresh := dd.Get([]byte(dedupKey)) == nil
			var ts [8]byte
			binary.BigEndian.PutUint64(ts[:], uint64(now.UnixNano()))
			if err := dd.Put([]byte(dedupKey), ts[:]); err != nil {
				return err
			}
			if fresh {
				// The count is kept beside the ids: bbolt's Stats would walk every page.
				n := s.dedupCount(tx) + 1
				if n > s.limits.DedupMax+s.limits.DedupMax/10 {
					var err error
					if n, err = s.pruneDedup(dd, now); err != nil {
						return err
					}
				}
				if err := s.setDedupCount(tx, n); err != nil {
					return err
				}
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

// pruneDedup drops ids older than the window, then the oldest until DedupMax remain.
func (s *DB) pruneDedup(dd *bolt.Bucket, now time.Time) (int, error) {
	type kv struct {
		k  []byte
		ts int64
	}
	var all []kv
	if err := dd.ForEach(func(k, v []byte) error {
		all = append(all, kv{append([]byte(nil), k...), int64(binary.BigEndian.Uint64(v))})
		return nil
	}); err != nil {
		return 0, err
	}
	keep := all[:0]
	for _, e := range all {
		if now.Sub(time.Unix(0, e.ts)) >= s.limits.DedupAge {
			if err := dd.Delete(e.k); err != nil {
				return 0, err
			}
			continue
		}
		keep = append(keep, e)
	}
	if over := len(keep) - s.limits.DedupMax; over > 0 {
		// Oldest first: a partial sort would do, but this runs once per DedupMax/10 accepts.
		for i := 0; i < over; i++ {
			oldest := i
			for j := i + 1; j < len(keep); j++ {
				if keep[j].ts < keep[oldest].ts {
					oldest = j
				}
			}
			keep[i], keep[oldest] = keep[oldest], keep[i]
			if err := dd.Delete(keep[i].k); err != nil {
				return 0, err
			}
		}
		keep = keep[over:]
	}
	return len(keep), nil
}

var dedupCountKey = []byte("\x00dedup_count") // no cursor name starts with NUL

func (s *DB) dedupCount(tx *bolt.Tx) int {
	if v := tx.Bucket(bucketCursors).Get(dedupCountKey); len(v) == 8 {
		return int(binary.BigEndian.Uint64(v))
	}
	return 0
}

func (s *DB) setDedupCount(tx *bolt.Tx, n int) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	return tx.Bucket(bucketCursors).Put(dedupCountKey, b[:])
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
