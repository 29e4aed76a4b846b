package channels

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// NoticeLimiter decides whether a stranger gets the "not allowed" answer again: once per
// window per user, remembering at most size users (the oldest are forgotten first), so a
// flood of strangers costs bounded memory and at most one answer each per window. Every
// adapter that answers strangers in DMs keeps one. With a State it also keeps whom it told
// there, so that a restart, or a gateway crashing and restarting in a loop, does not tell
// them again within the window.
type NoticeLimiter struct {
	mu     sync.Mutex
	size   int
	window time.Duration
	last   map[string]time.Time
	st     State  // nil: memory only
	name   string // the channel's, for the log
	set    string // the State's set of users told
}

// The map grows as strangers write: made with room for size entries, it held 96 KB from
// start for a limiter most bots never use.
func NewNoticeLimiter(size int, window time.Duration) *NoticeLimiter {
	return &NoticeLimiter{size: size, window: window, last: map[string]time.Time{}}
}

// Strangers is the limiter adapters use: one notice per stranger an hour, for up to 1024
// strangers at a time. st (nil: none) keeps whom the channel called name told across
// restarts.
func Strangers(st State, name string) *NoticeLimiter {
	n := NewNoticeLimiter(1024, time.Hour)
	n.st, n.name, n.set = st, name, name+".strangers"
	return n
}

// Allow reports whether user may be answered now, and records it if so in memory; the
// caller then tells them with Tell, which records it in the State off the intake (a
// durable write). A user the State says was told within the window is not answered again.
func (n *NoticeLimiter) Allow(user string, now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if t, ok := n.last[user]; ok && now.Sub(t) < n.window {
		return false
	}
	if n.st != nil {
		// A read, and only for a stranger this process has not answered lately. A failed
		// read answers them: a second notice is better than none.
		if told, err := n.st.Remembered(n.set, user, n.window); err == nil && told {
			n.record(user, now)
			return false
		}
	}
	n.record(user, now)
	return true
}

// told records in the State that user was answered (nothing without one).
func (n *NoticeLimiter) told(user string) error {
	if n.st == nil {
		return nil
	}
	return n.st.Remember(n.set, user, n.size, n.window)
}

// Tell sends user the not-allowed notice through send, off the intake (notices), having
// kept in the State first that they were told: a crash before the notice costs it, never
// a second one after a restart. It reports false when too many notices are in flight.
func (n *NoticeLimiter) Tell(notices *Notices, life *Lifecycle, log *slog.Logger, user string, send func(ctx context.Context, text string)) bool {
	return notices.Go(life, func(ctx context.Context) {
		if err := n.told(user); err != nil {
			log.Warn(n.name+": cannot keep that a stranger was told; a restart may tell them again", "err", err)
		}
		send(ctx, NotAllowedText(user))
	})
}

// record notes user at now, making room first when size users are known. Under mu.
func (n *NoticeLimiter) record(user string, now time.Time) {
	if _, ok := n.last[user]; !ok && len(n.last) >= n.size {
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
}

// MaxNoticesInFlight bounds the notices an adapter sends at once off its intake.
const MaxNoticesInFlight = 32

// Notices sends an adapter's notices (not allowed, file too large) off its intake, which
// reads every chat's messages in order: a notice waiting on a rate limit must not hold
// them up. At most MaxNoticesInFlight are in flight; past that (a flood of strangers) a
// notice is not sent, and Go reports false for the adapter to log.
type Notices struct{ inFlight atomic.Int64 }

// Go runs send on life's goroutines unless too many are in flight or life is stopping.
func (n *Notices) Go(life *Lifecycle, send func(ctx context.Context)) bool {
	if n.inFlight.Add(1) > MaxNoticesInFlight {
		n.inFlight.Add(-1)
		return false
	}
	if !life.Go(func(ctx context.Context) {
		defer n.inFlight.Add(-1)
		send(ctx)
	}) {
		n.inFlight.Add(-1)
	}
	return true
}
