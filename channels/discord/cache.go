package discord

import (
	"sync"
	"time"
)

// cache is a small map with a lifetime per entry and a bound on entries; when full, an
// arbitrary entry goes (map order), which is fine for lookups we can always redo.
type cache[V any] struct {
	mu  sync.Mutex
	ttl time.Duration
	max int
	m   map[string]cached[V]
}

type cached[V any] struct {
	v       V
	expires time.Time
}

func newCache[V any](max int, ttl time.Duration) *cache[V] {
	return &cache[V]{ttl: ttl, max: max, m: make(map[string]cached[V])}
}

func (c *cache[V]) get(k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || time.Now().After(e.expires) {
		delete(c.m, k)
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *cache[V]) put(k string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[k] = cached[V]{v: v, expires: time.Now().Add(c.ttl)}
}

// Bot-to-bot guard settings.
const (
	// BotStreak is how many bot messages in a row one chat may deliver; after that, bots
	// are ignored there until a human writes.
	BotStreak = 3
	// BotWindow: a bot message further than this from the previous one starts a new streak.
	BotWindow = 5 * time.Minute
)

// botGuard stops two bots that answer each other from looping forever.
type botGuard struct {
	mu    sync.Mutex
	chats map[string]*streak
}

type streak struct {
	n     int
	last  time.Time
	muted bool
}

const maxGuardChats = 10_000

func newBotGuard() *botGuard { return &botGuard{chats: map[string]*streak{}} }

// human records that a person wrote in chat: bots may talk there again.
func (g *botGuard) human(chat string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.chats, chat)
}

// allow records a bot message in chat and reports whether it may be delivered.
func (g *botGuard) allow(chat string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.chats[chat]
	if s == nil {
		if len(g.chats) >= maxGuardChats {
			for k := range g.chats {
				delete(g.chats, k)
				break
			}
		}
		s = &streak{}
		g.chats[chat] = s
	}
	if s.muted {
		return false
	}
	if now.Sub(s.last) > BotWindow {
		s.n = 0
	}
	s.last = now
	if s.n >= BotStreak {
		s.muted = true
		return false
	}
	s.n++
	return true
}
