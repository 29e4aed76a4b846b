package discord

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"gateway/channels"
)

// flushEvery bounds how often the cursors are written to Options.State: intake never
// waits for the write, and a burst of messages costs one write.
const flushEvery = time.Second

// book guards the catch-up cursors: the work goroutine moves them, the flush loop and
// the hold loop read them.
type book struct {
	name string // the State cursor they are kept under: "discord.catchup.<bot id>"

	mu    sync.Mutex
	cs    cursors
	dirty bool          // moved since the last write
	kick  chan struct{} // wakes the flush loop; capacity 1

	writeMu sync.Mutex // one write at a time, so that an older snapshot never lands last
	failing bool       // under writeMu: the last write failed (its warning was logged)
}

func newBook() book { return book{cs: cursors{}, kick: make(chan struct{}, 1)} }

func (b *book) saw(channel, id string) {
	b.mu.Lock()
	moved := b.cs.saw(channel, id)
	b.mu.Unlock()
	if moved {
		b.touch()
	}
}

func (b *book) took(channel, guild, id string, now time.Time) {
	b.mu.Lock()
	b.cs.took(channel, guild, id, now)
	b.mu.Unlock()
	b.touch()
}

func (b *book) refused(channel, guild, id string, now time.Time) {
	b.mu.Lock()
	b.cs.refused(channel, guild, id, now)
	b.mu.Unlock()
	b.touch()
}

func (b *book) skip(channel, id string) {
	b.mu.Lock()
	b.cs.skip(channel, id)
	b.mu.Unlock()
	b.touch()
}

func (b *book) recent(now time.Time) []chatCursor {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cs.recent(now)
}

// touch marks the cursors moved and wakes the flush loop.
func (b *book) touch() {
	b.mu.Lock()
	b.dirty = true
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// storedCursor is one chat in the State value: a JSON list, the recent chats only.
type storedCursor struct {
	Channel string `json:"c"`
	Guild   string `json:"g,omitempty"`
	Last    string `json:"l"`
	Active  int64  `json:"a"` // unix ms
}

func encodeCursors(ccs []chatCursor) string {
	out := make([]storedCursor, 0, len(ccs))
	for _, cc := range ccs {
		out = append(out, storedCursor{cc.channel, cc.guild, cc.last, cc.active.UnixMilli()})
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func decodeCursors(v string) ([]chatCursor, error) {
	var in []storedCursor
	if err := json.Unmarshal([]byte(v), &in); err != nil {
		return nil, err
	}
	out := make([]chatCursor, 0, len(in))
	for _, s := range in {
		if s.Channel == "" || s.Last == "" {
			continue
		}
		out = append(out, chatCursor{s.Channel, cursor{last: s.Last, guild: s.Guild, active: time.UnixMilli(s.Active)}})
	}
	return out, nil
}

// stored reads the cursors kept in State; nil without State or when none are kept.
func (c *Channel) stored() ([]chatCursor, error) {
	if c.state == nil || c.book.name == "" {
		return nil, nil
	}
	v, ok, err := c.state.Cursor(c.book.name)
	if err != nil || !ok {
		return nil, err
	}
	return decodeCursors(v)
}

// load merges the stored cursors into memory before a catch-up: another process, or this
// one before a restart, may have seen further.
func (c *Channel) load() {
	ccs, err := c.stored()
	if err != nil {
		c.log.Warn("discord: cannot read the stored catch-up cursors; catching up from what this process saw", "err", err)
		return
	}
	c.book.mu.Lock()
	defer c.book.mu.Unlock()
	for _, cc := range ccs {
		c.book.cs.merge(cc)
	}
}

// flush writes the recent cursors to State if they moved, merged with what is stored so
// that a process that held the connection before never moves a chat's cursor back. It
// reports whether the cursors are now stored.
func (c *Channel) flush() bool {
	if c.state == nil || c.book.name == "" {
		return true
	}
	b := &c.book
	b.writeMu.Lock()
	defer b.writeMu.Unlock()
	now := time.Now()
	b.mu.Lock()
	if !b.dirty {
		b.mu.Unlock()
		return true
	}
	b.dirty = false
	mine := b.cs.recent(now)
	b.mu.Unlock()

	all := cursors{}
	stored, err := c.stored()
	if err == nil {
		for _, cc := range stored {
			all.merge(cc)
		}
		for _, cc := range mine {
			all.merge(cc)
		}
		err = c.state.SetCursor(b.name, encodeCursors(all.recent(now)))
	}
	if err != nil {
		b.touch() // try again on the next round
		if !b.failing {
			c.log.Warn("discord: cannot store the catch-up cursors; retrying", "err", err)
		}
		b.failing = true
		return false
	}
	if b.failing {
		c.log.Info("discord: catch-up cursors stored again")
	}
	b.failing = false
	return true
}

// flushLoop writes the cursors when they moved, at most once per flushEvery, until ctx
// ends (Stop writes the last ones).
func (c *Channel) flushLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.book.kick:
		}
		c.flush()
		if !channels.Sleep(ctx, flushEvery) {
			return
		}
	}
}

// forget drops the cursors kept in memory once they are stored: after the connection went
// to another process they are stale, and the next catch-up reads the stored ones.
func (c *Channel) forget() {
	b := &c.book
	b.writeMu.Lock()
	defer b.writeMu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.dirty {
		b.cs = cursors{}
	}
}
