package channels

import (
	"sync"
	"time"
)

// NoticeLimiter decides whether a stranger gets the "not allowed" answer again: once per
// window per user, remembering at most size users (the oldest are forgotten first), so a
// flood of strangers costs bounded memory and at most one answer each per window. Every
// adapter that answers strangers in DMs keeps one.
type NoticeLimiter struct {
	mu     sync.Mutex
	size   int
	window time.Duration
	last   map[string]time.Time
}

// The map grows as strangers write: made with room for size entries, it held 96 KB from
// start for a limiter most bots never use.
func NewNoticeLimiter(size int, window time.Duration) *NoticeLimiter {
	return &NoticeLimiter{size: size, window: window, last: map[string]time.Time{}}
}

// Strangers is the limiter adapters use: one notice per stranger an hour, for up to 1024
// strangers at a time.
func Strangers() *NoticeLimiter { return NewNoticeLimiter(1024, time.Hour) }

// Allow reports whether user may be answered now, and records it if so.
func (n *NoticeLimiter) Allow(user string, now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if t, ok := n.last[user]; ok && now.Sub(t) < n.window {
		return false
	}
	if len(n.last) >= n.size {
		var oldest string
		var when time.Time
		for u, t := range n.last {
			if now.Sub(t) >= n.window {
				delete(n.last, u)
				continue
			}
			if oldest == "" || t.Before(when) {
				oldest, when = u, t
			}
		}
		if len(n.last) >= n.size {
			delete(n.last, oldest)
		}
	}
	n.last[user] = now
	return true
}
