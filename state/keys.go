package state

import (
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bucketKeys holds the named sets of remembered keys (RememberedKeys), one nested bucket
// per set: key → unix nanos last remembered.
var bucketKeys = []byte("keys")

// RememberedKeys are named sets of keys an adapter must not forget across a restart (the
// Slack threads the bot answered in), each bounded by count and age like the dedup window.
type RememberedKeys interface {
	// Remember adds key to set (or refreshes its time); the set keeps at most max keys,
	// each for at most age, the oldest forgotten first.
	Remember(set, key string, max int, age time.Duration) error
	// Remembered reports whether key was remembered in set less than age ago.
	Remembered(set, key string, age time.Duration) (bool, error)
}

// window is one bounded set of keys with the time each was stored: the mechanism of the
// dedup window and of every RememberedKeys set. The count is kept beside the keys (bbolt's
// Stats would walk every page), under countKey in the cursors bucket.
type window struct {
	b        *bolt.Bucket
	counts   *bolt.Bucket
	countKey []byte
	max      int
	age      time.Duration
}

// seen reports whether key was stored less than age before now.
func (w window) seen(key []byte, now time.Time) bool {
	v := w.b.Get(key)
	return len(v) == 8 && now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(v)))) < w.age
}

// put stores key at now and keeps the set within its bounds: once it holds a tenth more
// than max, the keys older than age go, then the oldest until max remain.
func (w window) put(key []byte, now time.Time) error {
	fresh := w.b.Get(key) == nil
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(now.UnixNano()))
	if err := w.b.Put(key, ts[:]); err != nil {
		return err
	}
	if !fresh {
		return nil
	}
	n := w.count() + 1
	if n > w.max+w.max/10 {
		var err error
		if n, err = w.prune(now); err != nil {
			return err
		}
	}
	return w.setCount(n)
}

func (w window) prune(now time.Time) (int, error) {
	type kv struct {
		k  []byte
		ts int64
	}
	var keep []kv
	var old [][]byte
	if err := w.b.ForEach(func(k, v []byte) error {
		k = append([]byte(nil), k...)
		var ts int64
		if len(v) == 8 {
			ts = int64(binary.BigEndian.Uint64(v))
		}
		if now.Sub(time.Unix(0, ts)) >= w.age {
			old = append(old, k)
		} else {
			keep = append(keep, kv{k, ts})
		}
		return nil
	}); err != nil {
		return 0, err
	}
	if over := len(keep) - w.max; over > 0 {
		sort.Slice(keep, func(i, j int) bool { return keep[i].ts < keep[j].ts })
		for _, e := range keep[:over] {
			old = append(old, e.k)
		}
		keep = keep[over:]
	}
	for _, k := range old {
		if err := w.b.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(keep), nil
}

func (w window) count() int {
	if v := w.counts.Get(w.countKey); len(v) == 8 {
		return int(binary.BigEndian.Uint64(v))
	}
	return 0
}

func (w window) setCount(n int) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	return w.counts.Put(w.countKey, b[:])
}

// keysCountKey is where a set's count is kept in the cursors bucket; no cursor name
// starts with NUL.
func keysCountKey(set string) []byte { return []byte("\x00keys_count\x00" + set) }

// Remember adds key to set durably (see RememberedKeys).
func (s *DB) Remember(set, key string, max int, age time.Duration) error {
	if set == "" || key == "" || max <= 0 || age <= 0 {
		return fmt.Errorf("state: remember: a set, a key and positive bounds are required")
	}
	now := s.now()
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketKeys).CreateBucketIfNotExists([]byte(set))
		if err != nil {
			return err
		}
		return window{b: b, counts: tx.Bucket(bucketCursors), countKey: keysCountKey(set), max: max, age: age}.put([]byte(key), now)
	})
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

// Remembered reports whether key is in set and younger than age.
func (s *DB) Remembered(set, key string, age time.Duration) (bool, error) {
	now := s.now()
	var ok bool
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketKeys).Bucket([]byte(set)); b != nil {
			ok = window{b: b, age: age}.seen([]byte(key), now)
		}
		return nil
	})
	return ok, err
}
