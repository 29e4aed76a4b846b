package channels

import "sync"

// Dedup remembers the most recent message keys so that a redelivered update is dropped.
// It is bounded: past Size keys the oldest are forgotten.
type Dedup struct {
	mu   sync.Mutex
	size int
	seen map[string]struct{}
	ring []string
	next int
}

// NewDedup remembers up to size keys (at least 1). Its memory grows with the keys it holds,
// up to size: a gateway holds several (10,000 keys for the gateway, thousands per channel),
// and sized up front they were over a megabyte of private memory at start.
func NewDedup(size int) *Dedup {
	size = max(size, 1)
	return &Dedup{size: size, seen: map[string]struct{}{}}
}

// Seen records key and reports whether it had been recorded before.
func (d *Dedup) Seen(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.seen[key]; ok {
		return true
	}
	if len(d.ring) < d.size {
		d.ring = append(d.ring, key) // not full yet: nothing to forget
	} else {
		if old := d.ring[d.next]; old != "" {
			delete(d.seen, old)
		}
		d.ring[d.next] = key
		d.next = (d.next + 1) % d.size
	}
	d.seen[key] = struct{}{}
	return false
}

// Forget removes key, so that a message whose delivery failed can be taken when redelivered.
func (d *Dedup) Forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.seen, key)
}
