package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gateway/channels"
)

// Every accepted message is delivered at once, its media as references (Part.Ref) that the
// gateway has Fetch download on the chat's own session: the intake never waits on a
// download, and an update is acknowledged to Telegram only once the gateway journaled it.
//
// An album is the one exception to "at once": its items arrive as separate updates, and
// are gathered here into one message. None of them is acknowledged before the album was
// delivered: take returns the pending album, the poll loop keeps the offset at the album's
// first item (re-polled items are recognised and wait on the same album) and the webhook
// answers each item's POST once the album was delivered. An album is delivered after
// albumWait without a new item, at maxAlbum items, or as soon as its chat sends anything
// else (so the chat's order holds).

const (
	albumWait = time.Second // how long an album waits for its next item
	maxAlbum  = 10          // Telegram's own limit of items in an album
)

// item is one accepted update of an album.
type item struct {
	msg *message
	m   *channels.Message // normalised, text only
	key string            // its dedup key
}

// album is one chat's album being gathered. Its fields are guarded by albumMu until done
// is closed; err is set before.
type album struct {
	chat    int64
	group   string
	items   []*item
	claimed bool          // being delivered: no item joins any more
	kick    chan struct{} // 1-buffered: an item was added
	done    chan struct{} // closed once delivered (err nil) or given up (err set)
	err     error
}

// has reports whether the album holds message id.
func (a *album) has(id int) bool {
	for _, it := range a.items {
		if it.msg.ID == id {
			return true
		}
	}
	return false
}

// settled reports whether a was delivered; false while it is still being gathered.
func (a *album) settled() (bool, error) {
	select {
	case <-a.done:
		return true, a.err
	default:
		return false, nil
	}
}

// wait blocks until a was delivered (nil) or given up.
func (a *album) wait(ctx context.Context) error {
	select {
	case <-a.done:
		return a.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// joinAlbum adds it to its chat's album of group, starting one (and delivering first an
// album of another group still pending in the chat).
func (c *Channel) joinAlbum(ctx context.Context, it *item, group string) (*album, error) {
	chat := it.msg.Chat.ID
	for {
		c.albumMu.Lock()
		a := c.albums[chat]
		if a != nil && a.group != group {
			c.albumMu.Unlock()
			if err := c.flush(ctx, a); err != nil {
				return nil, err
			}
			continue
		}
		if a == nil {
			a = &album{chat: chat, group: group, kick: make(chan struct{}, 1), done: make(chan struct{})}
			if !c.life.Go(func(ctx context.Context) { c.gather(ctx, a) }) {
				c.albumMu.Unlock()
				return nil, errors.New("telegram: the channel is stopping")
			}
			c.albums[chat] = a
		}
		a.items = append(a.items, it)
		c.albumMu.Unlock()
		select {
		case a.kick <- struct{}{}:
		default:
		}
		return a, nil
	}
}

// holding returns the chat's pending album when it holds message id (an update polled
// again while its album is gathered), nil otherwise.
func (c *Channel) holding(chat int64, id int) *album {
	c.albumMu.Lock()
	defer c.albumMu.Unlock()
	if a := c.albums[chat]; a != nil && a.has(id) {
		return a
	}
	return nil
}

// pendingAlbum returns the chat's album still being gathered, nil when none.
func (c *Channel) pendingAlbum(chat int64) *album {
	c.albumMu.Lock()
	defer c.albumMu.Unlock()
	return c.albums[chat]
}

// gather delivers a once no item came for albumWait, or it is full.
func (c *Channel) gather(ctx context.Context, a *album) {
	t := time.NewTimer(albumWait)
	defer t.Stop()
	for {
		select {
		case <-a.kick:
			c.albumMu.Lock()
			n := len(a.items)
			c.albumMu.Unlock()
			if n >= maxAlbum {
				_ = c.flush(ctx, a)
				return
			}
			t.Reset(albumWait)
		case <-t.C:
			_ = c.flush(ctx, a)
			return
		case <-a.done: // delivered by its chat's next message
			return
		case <-ctx.Done():
			_ = c.flush(ctx, a) // fails at once: the items were not acknowledged and come again
			return
		}
	}
}

// flush delivers a, or waits for whoever already is. An error means the album was not
// taken: its items were not acknowledged and come again.
func (c *Channel) flush(ctx context.Context, a *album) error {
	c.albumMu.Lock()
	if a.claimed {
		c.albumMu.Unlock()
		return a.wait(ctx)
	}
	a.claimed = true
	if c.albums[a.chat] == a {
		delete(c.albums, a.chat)
	}
	items := a.items
	c.albumMu.Unlock()
	err := ctx.Err()
	if err == nil {
		err = c.deliverAlbum(ctx, items)
	}
	if err != nil {
		for _, it := range items {
			c.dedup.Forget(it.key)
		}
	}
	a.err = err
	close(a.done)
	return err
}

// flushChat delivers the chat's pending album, if any, before a later message of the chat.
func (c *Channel) flushChat(ctx context.Context, chat int64) error {
	if a := c.pendingAlbum(chat); a != nil {
		return c.flush(ctx, a)
	}
	return nil
}

// deliverAlbum makes one message of an album's items (the first item's ids, every
// caption, mentioned when any item was) and delivers it with its media as references.
func (c *Channel) deliverAlbum(ctx context.Context, items []*item) error {
	m := *items[0].m
	m.Parts = nil
	for _, it := range items {
		m.Parts = append(m.Parts, it.m.Parts...)
		m.Mentioned = m.Mentioned || it.m.Mentioned
		if m.ReplyTo == nil {
			m.ReplyTo = it.m.ReplyTo
		}
	}
	if c.cfg.Access.Check(&m) == channels.NotMentioned {
		return nil // the gate applies to the whole album
	}
	captioned := len(m.Parts) > 0 // only captions so far; addMedia adds notes of its own
	for _, it := range items {
		c.addMedia(&m, it.msg, captioned)
	}
	if !fillEmpty(&m, items[0].msg) {
		return nil
	}
	return c.deliver(ctx, &m)
}

// migrateInbox hands over, once, what an earlier version left in its own inbox journal
// (state_dir/telegram/inbox, moved there from state_dir/telegram/telegram by gateway run):
// messages it had acknowledged but not yet delivered. The gateway's intake journal keeps
// them from now on.
func (c *Channel) migrateInbox(ctx context.Context) {
	dir := filepath.Join(c.dir, "inbox")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return // none: the usual case
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names) // zero-padded update ids
	left := false
	for _, name := range names {
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		var u update
		if err == nil {
			err = json.Unmarshal(b, &u)
		}
		if err != nil {
			c.log.Warn("telegram: dropping a damaged entry of the old inbox journal", "file", name, "err", err)
			_ = os.Remove(p)
			continue
		}
		a, err := c.safeHandle(ctx, &u)
		if err == nil && a != nil {
			err = a.wait(ctx)
		}
		if err != nil {
			c.log.Warn("telegram: a message from before the upgrade could not be handed over; it stays for the next start", "update", u.ID, "err", err)
			left = true
			continue
		}
		_ = os.Remove(p)
	}
	if !left {
		_ = os.RemoveAll(dir)
	}
}

// tellStranger sends the not-allowed notice off the intake, so that a chat held by a 429
// does not hold the intake (channels.Notices). That the user was told is kept first: a
// crash before the notice costs it, never a second one after a restart.
func (c *Channel) tellStranger(msg *message, user string) {
	if !c.strangers.Tell(&c.notices, c.life, c.log, user, func(ctx context.Context, text string) { c.notify(ctx, msg, text) }) {
		c.log.Warn("telegram: too many notices in flight; one was not sent", "chat", msg.Chat.ID)
	}
}
