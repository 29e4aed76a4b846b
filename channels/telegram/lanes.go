package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-telegram/bot/models"

	"gateway/channels"
)

// Messages with media do not wait on the intake loop: each chat with media to fetch gets a
// lane, a goroutine that downloads and delivers that chat's messages in order. Before an
// update joins a lane it is written to the inbox journal under state_dir, so the intake can
// acknowledge it to Telegram at once (a slow or failing download never holds up another
// chat, nor the offset) and a restart still finishes it. Messages of a chat whose lane is
// busy join the lane too, to keep the chat's order.

const (
	maxLanes     = 1024        // chats with media in flight at once
	maxLaneQueue = 100         // updates waiting in one chat's lane
	albumWait    = time.Second // how long an album waits for its next item
	maxAlbum     = 10          // Telegram's own limit of items in an album
	maxNotices   = 32          // access notices in flight at once
)

// errLaneFull: the update could not be queued now; it will come again.
var errLaneFull = errors.New("telegram: too many messages are waiting for their media; the update will come again")

// item is one accepted update on its way to the gateway.
type item struct {
	msg   *models.Message
	m     *channels.Message // normalised, text only
	chat  int64
	group string // media_group_id: the items of an album are delivered as one message
	jpath string // its inbox journal file
}

type lane struct {
	queue []*item
	wake  chan struct{} // 1-buffered: an item was added
}

// take hands one update over: filters it, normalises it, applies the access policy, and
// then delivers it at once or queues it on its chat's lane. jpath is the journal file of
// an update replayed after a restart ("" for a fresh one). A nil error means the update is
// done with (delivered, queued in a lane, or deliberately dropped) and may be
// acknowledged; an error means it must come again.
func (c *Channel) take(ctx context.Context, u *models.Update, jpath string) error {
	drop := func() error {
		if jpath != "" { // a replayed update that is done with
			_ = os.Remove(jpath)
		}
		return nil
	}
	msg := u.Message
	if msg == nil || msg.From == nil || msg.From.IsBot || msg.Chat.Type == models.ChatTypeChannel {
		return drop() // edits, channel posts, our own and other bots' messages
	}
	m, forUs := c.normalise(msg)
	if !forUs {
		return drop()
	}
	key := m.ChatID + ":" + m.ID
	if c.dedup.Seen(key) {
		c.log.Debug("dropped a redelivered message", "chat", m.ChatID, "message", m.ID)
		return drop()
	}
	probe := *m
	if msg.MediaGroupID != "" {
		// The mention is in the caption of one item: the gate applies to the whole album
		// once it is gathered.
		probe.Mentioned = true
	}
	switch c.cfg.Access.Check(&probe) {
	case channels.NotAllowed:
		c.log.Info("message from a user not on allow_from", "user", m.UserID, "chat", m.ChatID)
		if m.ChatType == channels.ChatDM && c.strangers.Allow(m.UserID, time.Now()) {
			c.notifyLater(msg, channels.NotAllowedText(m.UserID))
		}
		return drop()
	case channels.NotMentioned:
		return drop()
	}
	files, notes := attachments(msg)
	it := &item{msg: msg, m: m, chat: msg.Chat.ID, group: msg.MediaGroupID, jpath: jpath}
	queued, err := c.toLane(u, it, len(files) > 0 || it.group != "" || jpath != "")
	if err != nil {
		c.dedup.Forget(key)
		return err
	}
	if queued {
		return nil
	}
	// Nothing to download: only descriptions of what arrived.
	for _, n := range notes {
		m.Parts = append(m.Parts, channels.TextPart(n))
	}
	if !fillEmpty(m, msg) {
		return nil // a service message
	}
	if err := c.deliver(ctx, m); err != nil {
		c.dedup.Forget(key)
		return err
	}
	return nil
}

// fillEmpty makes sure a message a person sent reaches the agent as something: when
// nothing of it could be shown, it says so. It reports false for service messages
// (members joining, pins, topic changes), which nobody addressed to the bot.
func fillEmpty(m *channels.Message, msg *models.Message) bool {
	if len(m.Parts) > 0 {
		return true
	}
	if isService(msg) {
		return false
	}
	if msg.Text != "" || msg.Caption != "" {
		m.Parts = append(m.Parts, channels.TextPart("[The user addressed the bot without any other text]"))
	} else {
		m.Parts = append(m.Parts, channels.TextPart("[The user sent a kind of Telegram message this bot cannot show]"))
	}
	return true
}

// toLane queues it on its chat's lane when need is set or the chat's lane is busy (its
// order must hold), writing the update to the inbox journal first. It reports false when
// the message may be delivered at once instead.
func (c *Channel) toLane(u *models.Update, it *item, need bool) (bool, error) {
	c.laneMu.Lock()
	l := c.lanes[it.chat]
	if l == nil && !need {
		c.laneMu.Unlock()
		return false, nil
	}
	full := (l == nil && len(c.lanes) >= maxLanes) || (l != nil && len(l.queue) >= maxLaneQueue)
	c.laneMu.Unlock()
	if full {
		return true, errLaneFull
	}
	// Intake is sequential per chat, so no other lane for this chat appears meanwhile;
	// the one seen may end, and a new one then starts below.
	if it.jpath == "" {
		p, err := c.journal(u)
		if err != nil {
			// A disk problem must not wedge the intake: the message still goes, only a
			// restart before it is delivered would lose it.
			c.log.Error("telegram: cannot keep a message in the inbox journal; a restart now would lose it", "chat", it.chat, "err", err)
		}
		it.jpath = p
	}
	c.laneMu.Lock()
	defer c.laneMu.Unlock()
	l = c.lanes[it.chat]
	if l == nil {
		l = &lane{wake: make(chan struct{}, 1)}
		chat := it.chat
		if !c.life.Go(func(ctx context.Context) { c.runLane(ctx, chat, l) }) {
			return true, errors.New("telegram: the channel is stopping")
		}
		c.lanes[chat] = l
	}
	l.queue = append(l.queue, it)
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true, nil
}

// runLane downloads and delivers a chat's queued messages in order until none is left.
func (c *Channel) runLane(ctx context.Context, chat int64, l *lane) {
	defer func() {
		c.laneMu.Lock()
		if c.lanes[chat] == l {
			delete(c.lanes, chat)
		}
		c.laneMu.Unlock()
	}()
	for {
		c.laneMu.Lock()
		if len(l.queue) == 0 || ctx.Err() != nil {
			// Left on stop: the journal keeps what was not delivered for the next start.
			delete(c.lanes, chat)
			c.laneMu.Unlock()
			return
		}
		it := l.queue[0]
		l.queue = l.queue[1:]
		c.laneMu.Unlock()
		batch := []*item{it}
		if it.group != "" {
			for len(batch) < maxAlbum {
				next := c.nextOfAlbum(ctx, l, it.group)
				if next == nil {
					break
				}
				batch = append(batch, next)
			}
		}
		if !c.process(ctx, batch) {
			return
		}
	}
}

// nextOfAlbum returns the lane's next item when it belongs to album group, waiting up to
// albumWait for it to arrive; nil when the album is complete.
func (c *Channel) nextOfAlbum(ctx context.Context, l *lane, group string) *item {
	t := time.NewTimer(albumWait)
	defer t.Stop()
	for {
		c.laneMu.Lock()
		if len(l.queue) > 0 {
			next := l.queue[0]
			if next.group != group {
				c.laneMu.Unlock()
				return nil
			}
			l.queue = l.queue[1:]
			c.laneMu.Unlock()
			return next
		}
		c.laneMu.Unlock()
		select {
		case <-l.wake:
		case <-t.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// process downloads the media of one message (or of an album's items, as one message),
// tells the user in plain words what could not be fetched, and delivers the rest. It
// reports false only when the channel is stopping; the journal then keeps the batch.
func (c *Channel) process(ctx context.Context, batch []*item) bool {
	m := merge(batch)
	if c.cfg.Access.Check(m) == channels.NotMentioned {
		c.forget(batch)
		return true
	}
	var media []channels.Part
	var refusals []string
	failed := 0
	for _, it := range batch {
		parts, refusal, err := c.media(ctx, it.msg)
		if err != nil {
			return false // stopping
		}
		if refusal != "" {
			failed++
			if !containsString(refusals, refusal) {
				refusals = append(refusals, refusal)
			}
			continue
		}
		media = append(media, parts...)
	}
	if len(refusals) > 0 {
		c.notify(ctx, batch[0].msg, strings.Join(refusals, "\n"))
	}
	if failed == len(batch) {
		c.forget(batch) // the user was told; nothing is left to deliver
		return true
	}
	if failed > 0 {
		media = append(media, channels.TextPart(fmt.Sprintf("[%d of the %d items of this album could not be downloaded]", failed, len(batch))))
	}
	m.Parts = append(m.Parts, media...)
	for _, p := range media {
		if p.Type == channels.PartAudio && p.Voice {
			m.IsVoice = true
		}
	}
	if !fillEmpty(m, batch[0].msg) {
		c.forget(batch)
		return true
	}
	for attempt := 1; ; attempt++ {
		err := c.deliver(ctx, m)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return false
		}
		// Only this chat waits: the gateway did not take its message now.
		c.log.Warn("telegram: a message with media was not taken; trying again", "chat", m.ChatID, "err", err)
		if !channels.Sleep(ctx, pollBackoff(attempt)) {
			return false
		}
	}
	c.forget(batch)
	return true
}

// merge makes one message of an album's items (or returns the single item's message): the
// first item's ids, every caption, mentioned when any item was.
func merge(batch []*item) *channels.Message {
	m := *batch[0].m
	m.Parts = nil
	for _, it := range batch {
		m.Parts = append(m.Parts, it.m.Parts...)
		m.Mentioned = m.Mentioned || it.m.Mentioned
		if m.ReplyTo == nil {
			m.ReplyTo = it.m.ReplyTo
		}
	}
	return &m
}

// forget removes a finished batch from the inbox journal.
func (c *Channel) forget(batch []*item) {
	for _, it := range batch {
		if it.jpath == "" {
			continue
		}
		if err := os.Remove(it.jpath); err != nil && !os.IsNotExist(err) {
			c.log.Warn("telegram: cannot remove a finished message from the inbox journal; a restart may repeat it", "err", err)
		}
	}
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (c *Channel) inboxDir() string { return filepath.Join(c.dir, "inbox") }

// journal writes u to the inbox journal. Like the offset, it is not fsynced: a process
// crash keeps it (the page cache), and only a power cut in the next moments loses it.
func (c *Channel) journal(u *models.Update) (string, error) {
	b, err := json.Marshal(u)
	if err != nil {
		return "", err
	}
	p := filepath.Join(c.inboxDir(), fmt.Sprintf("%020d.json", u.ID))
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return p, nil
}

// replayInbox queues again, in update order, the messages a previous run accepted but did
// not finish delivering.
func (c *Channel) replayInbox(ctx context.Context) {
	entries, err := os.ReadDir(c.inboxDir())
	if err != nil {
		c.log.Warn("telegram: cannot read the inbox journal; messages accepted before a restart may be lost", "err", err)
		return
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		} else if strings.HasSuffix(e.Name(), ".tmp") {
			_ = os.Remove(filepath.Join(c.inboxDir(), e.Name()))
		}
	}
	sort.Strings(names) // zero-padded update ids
	for _, name := range names {
		p := filepath.Join(c.inboxDir(), name)
		b, err := os.ReadFile(p)
		var u models.Update
		if err == nil {
			err = json.Unmarshal(b, &u)
		}
		if err != nil {
			c.log.Warn("telegram: dropping a damaged entry of the inbox journal", "file", name, "err", err)
			_ = os.Remove(p)
			continue
		}
		if err := c.safeTake(ctx, &u, p); err != nil {
			c.log.Warn("telegram: a message from before the restart could not be queued; it stays for the next start", "update", u.ID, "err", err)
		}
	}
}

// notifyLater sends an access notice off the intake, so that a chat held by a 429 does not
// hold the intake; at most maxNotices are in flight, the rest are only logged.
func (c *Channel) notifyLater(msg *models.Message, text string) {
	if c.notices.Add(1) > maxNotices {
		c.notices.Add(-1)
		c.log.Warn("telegram: too many notices in flight; one was not sent", "chat", msg.Chat.ID)
		return
	}
	if !c.life.Go(func(ctx context.Context) {
		defer c.notices.Add(-1)
		c.notify(ctx, msg, text)
	}) {
		c.notices.Add(-1)
	}
}
