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

// NewDedup remembers up to size keys (at least 1).
func NewDedup(size int) *Dedup {
	size = max(size, 1)
	return &Dedup{size: size, seen: make(map[string]struct{}, size), ring: make([]string, size)}
}

// Seen records key and reports whether it had been recorded before.
func (d *Dedup) Seen(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.seen[key]; ok {
		return true
	}
	if old := d.ring[d.next]; old != "" {
		delete(d.seen, old)
	}
	d.ring[d.next] = key
	d.next = (d.next + 1) % d.size
	d.seen[key] = struct{}{}
	return false
}

// Forget removes key, so that a message whose delivery failed can be taken when redelivered.
func (d *Dedup) Forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.seen, key)
}
