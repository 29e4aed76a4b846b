package discord

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/bwmarrin/discordgo"
)

// Catch-up bounds. Discord never redelivers what was posted while a session was lost: after
// a reconnect that could not RESUME, the adapter reads the missed messages over REST, in
// the DMs and threads it was active in, and passes them through the normal inbound path.
const (
	catchUpChats  = 50             // the most recently active chats that are read
	catchUpWithin = 24 * time.Hour // and only those active this recently
	catchUpPage   = 50             // messages per request
	catchUpPages  = 2              // requests per chat: at most 100 messages each
	maxCursors    = 1000           // chats remembered; the least recently active go first
)

// inbound is one item of the work loop: a message from the gateway, or the order to
// catch up, queued by READY after a session was lost, so that it runs before any message
// of the new session and the missed messages keep their place in each chat's order.
type inbound struct {
	m       *discordgo.Message
	catchUp bool
	done    chan struct{} // closed by the work loop when it reaches this item
}

// cursor is where the adapter stands in one DM or thread it is active in.
type cursor struct {
	last   string    // the newest message id seen there
	guild  string    // "" for a DM; REST messages carry no guild_id
	active time.Time // when the bot last took a message there
	// held is the oldest message there the gateway refused (it was stopping, or could not
	// store it): last stays before it until it is taken, so that a catch-up, this
	// process's next or the next process's, reads it again. Discord never sends it again.
	held string
}

// cursors tracks, per chat the bot is active in, the last message id seen. The book
// (state.go) guards it and keeps the recent part in Options.State.
type cursors map[string]*cursor

// saw advances the cursor of channel, if the bot is active there, to id; it says whether
// the cursor moved.
func (cs cursors) saw(channel, id string) bool {
	c := cs[channel]
	if c == nil || !snowLess(c.last, id) || (c.held != "" && !snowLess(id, c.held)) {
		return false
	}
	c.last = id
	return true
}

// took marks channel active now, at message id.
func (cs cursors) took(channel, guild, id string, now time.Time) {
	c := cs.add(channel, id)
	c.guild, c.active = guild, now
	if c.held == id {
		c.held = "" // read again and taken this time
	}
	cs.saw(channel, id)
}

// refused holds channel's cursor before message id, which the gateway did not take, and
// marks the chat active now, so that the next catch-up reads the message again.
func (cs cursors) refused(channel, guild, id string, now time.Time) {
	prev := snowBefore(id)
	c := cs.add(channel, prev)
	c.guild, c.active = guild, now
	if c.held == "" || snowLess(id, c.held) {
		c.held = id
	}
	if !snowLess(c.last, id) {
		c.last = prev
	}
}

// skip moves channel's cursor to id even past a refused message: catch-up gave up on
// what lies before id.
func (cs cursors) skip(channel, id string) {
	if c := cs[channel]; c != nil {
		c.held = ""
	}
	cs.saw(channel, id)
}

// add returns channel's cursor, made at last if new; the least recently active chat goes
// when the bound is reached.
func (cs cursors) add(channel, last string) *cursor {
	c := cs[channel]
	if c == nil {
		if len(cs) >= maxCursors {
			var oldest string
			for k, v := range cs {
				if oldest == "" || v.active.Before(cs[oldest].active) {
					oldest = k
				}
			}
			delete(cs, oldest)
		}
		c = &cursor{last: last}
		cs[channel] = c
	}
	return c
}

// merge takes in a cursor known elsewhere (stored by this or another process): the later
// position and activity of the two win.
func (cs cursors) merge(cc chatCursor) {
	c := cs.add(cc.channel, cc.last)
	if snowLess(c.last, cc.last) {
		c.last = cc.last
	}
	if cc.active.After(c.active) {
		c.active = cc.active
	}
	if c.guild == "" {
		c.guild = cc.guild
	}
}

type chatCursor struct {
	channel string
	cursor
}

// recent lists the chats active since now-catchUpWithin, the most recent first, at most
// catchUpChats of them.
func (cs cursors) recent(now time.Time) []chatCursor {
	var out []chatCursor
	for ch, c := range cs {
		if now.Sub(c.active) <= catchUpWithin {
			out = append(out, chatCursor{ch, *c})
		}
	}
	slices.SortFunc(out, func(a, b chatCursor) int { return b.active.Compare(a.active) })
	return out[:min(len(out), catchUpChats)]
}

// snowBefore is the snowflake just before id, so that a read "after" it starts at id; ""
// (read from the start) when id is not a snowflake.
func snowBefore(id string) string {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil || n == 0 {
		return ""
	}
	return strconv.FormatUint(n-1, 10)
}

// snowLess orders snowflakes (decimal, no leading zeros) by value; "" comes first.
func snowLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// catchUp reads what was posted in the recently active chats while the session was lost
// and handles it, oldest first, like messages from the gateway: the access policy, the
// mention gate and dedup apply as usual. Runs on the work goroutine.
func (c *Channel) catchUp(ctx context.Context) {
	c.load()
	chats := c.book.recent(time.Now())
	if len(chats) == 0 {
		return
	}
	c.log.Info("discord: reading what was missed while not connected", "chats", len(chats))
	total := 0
	for _, cc := range chats {
		if ctx.Err() != nil {
			return
		}
		msgs, more, err := c.missed(ctx, cc)
		if err != nil {
			c.log.Warn("discord: could not read the messages missed in a chat", "chat_id", cc.channel, "err", err)
		}
		if more {
			c.log.Warn("discord: more messages were missed in a chat than catch-up reads; the later ones were skipped",
				"chat_id", cc.channel, "read", len(msgs), "bound", catchUpPage*catchUpPages)
		}
		for _, m := range msgs {
			if ctx.Err() != nil {
				return
			}
			c.handle(ctx, m)
		}
		total += len(msgs)
		if more {
			// Skipped for good: a later catch-up starts after the newest message, not
			// in the middle of stale ones.
			if newest, _, err := c.history(ctx, cc.channel, url.Values{"limit": {"1"}}); err == nil && len(newest) > 0 {
				c.book.skip(cc.channel, newest[len(newest)-1].ID)
			}
		}
	}
	c.log.Info("discord: caught up", "chats", len(chats), "messages", total)
}

// missed fetches the messages after cc's cursor, oldest first, at most catchUpPages
// pages; more says the last page was full, so that some may be left unread.
func (c *Channel) missed(ctx context.Context, cc chatCursor) (msgs []*discordgo.Message, more bool, err error) {
	after := cc.last
	for range catchUpPages {
		page, n, err := c.history(ctx, cc.channel, url.Values{"after": {after}, "limit": {strconv.Itoa(catchUpPage)}})
		if err != nil {
			return msgs, false, err
		}
		for _, m := range page {
			if m.GuildID == "" {
				m.GuildID = cc.guild
			}
			if m.ChannelID == "" {
				m.ChannelID = cc.channel
			}
		}
		msgs = append(msgs, page...)
		if n < catchUpPage || len(page) == 0 {
			return msgs, false, nil
		}
		after = page[len(page)-1].ID
	}
	return msgs, true, nil
}

// history is one GET /channels/{id}/messages?q: the messages it could read (after
// q's "after", if set), oldest first, and how many Discord sent.
func (c *Channel) history(ctx context.Context, channel string, q url.Values) ([]*discordgo.Message, int, error) {
	endpoint := discordgo.EndpointChannelMessages(channel)
	after := q.Get("after")
	var body []byte
	err := c.call(ctx, "", "read missed messages", func(ctx context.Context) (err error) {
		body, err = c.s.RequestWithBucketID(http.MethodGet, endpoint+"?"+q.Encode(), nil, endpoint, discordgo.WithContext(ctx))
		return unwrapURL(err)
	})
	if err != nil {
		return nil, 0, err
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		return nil, 0, fmt.Errorf("discord: read missed messages in channel %s: %w", channel, err)
	}
	var out []*discordgo.Message
	for _, raw := range raws {
		m, err := decodeMessage(raw)
		if err != nil {
			c.log.Warn("discord: a missed message could not be read", "chat_id", channel, "err", err)
			continue
		}
		if !snowLess(after, m.ID) {
			continue // not after the cursor: a server that ignored after
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *discordgo.Message) int {
		if a.ID == b.ID {
			return 0
		}
		if snowLess(a.ID, b.ID) {
			return -1
		}
		return 1
	})
	return out, len(raws), nil
}
