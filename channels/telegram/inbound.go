package telegram

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"gateway/channels"
)

// safeHandle is take that survives a panic on a malformed update: the update is logged and
// dropped (repeating it would only panic again), and the process lives on.
func (c *Channel) safeHandle(ctx context.Context, u *update) (a *album, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("telegram: dropped an update that could not be handled", "update", u.ID, "panic", fmt.Sprint(r))
			a, err = nil, nil
		}
	}()
	return c.take(ctx, u)
}

// take hands one update over: filters it, normalises it, applies the access policy and
// delivers it, its media as references for the gateway to Fetch. A nil error and album
// means the update is done with (delivered or deliberately dropped) and may be
// acknowledged; an album means it may be acknowledged once that album was delivered (see
// album.go); an error means it must come again.
func (c *Channel) take(ctx context.Context, u *update) (*album, error) {
	msg := u.Message
	if msg != nil && msg.Chat.Type != models.ChatTypeChannel && (msg.MigrateToChatID != 0 || msg.MigrateFromChatID != 0) {
		// Telegram's notice, in the old group or the new supergroup, that the chat has a new
		// id: the conversation follows it. Nobody addressed it to the bot, so neither the
		// access policy nor the mention gate applies.
		old, moved := msg.Chat.ID, msg.MigrateToChatID
		if moved == 0 {
			old, moved = msg.MigrateFromChatID, msg.Chat.ID
		}
		if err := c.flushChat(ctx, msg.Chat.ID); err != nil {
			return nil, err
		}
		return nil, c.chatMoved(ctx, old, moved)
	}
	if msg == nil || msg.From == nil || (msg.From.IsBot && !anonymousAdmin(msg)) || msg.Chat.Type == models.ChatTypeChannel {
		return nil, nil // edits, channel posts, our own and other bots' messages
	}
	if a := c.holding(msg.Chat.ID, msg.ID); a != nil {
		return a, nil // polled again while its album is gathered
	}
	m, forUs := c.normalise(msg)
	if !forUs {
		return nil, nil
	}
	key := m.ChatID + ":" + m.ID
	if c.dedup.Seen(key) {
		c.log.Debug("dropped a redelivered message", "chat", m.ChatID, "message", m.ID)
		return nil, nil
	}
	probe := *m
	if msg.MediaGroupID != "" {
		// The mention is in the caption of one item: the gate applies to the whole album
		// once it is gathered.
		probe.Mentioned = true
	}
	switch c.cfg.Access.Check(&probe) {
	case channels.NotAllowed:
		if anonymousAdmin(msg) {
			// No user id to put on allow_from: only dm_policy open answers them.
			c.log.Info("message from an anonymous admin of a group (sent as the group); they have no user id for allow_from, so only dm_policy: open answers them", "chat", m.ChatID)
			return nil, nil
		}
		c.log.Info("message from a user not on allow_from", "user", m.UserID, "chat", m.ChatID)
		if m.ChatType == channels.ChatDM && c.strangers.Allow(m.UserID, time.Now()) {
			c.tellStranger(msg, m.UserID)
		}
		return nil, nil
	case channels.NotMentioned:
		return nil, nil
	}
	if msg.MediaGroupID != "" {
		a, err := c.joinAlbum(ctx, &item{msg: msg, m: m, key: key}, msg.MediaGroupID)
		if err != nil {
			c.dedup.Forget(key)
		}
		return a, err
	}
	// The chat's album still being gathered goes first: the chat's order holds.
	if err := c.flushChat(ctx, msg.Chat.ID); err != nil {
		c.dedup.Forget(key)
		return nil, err
	}
	c.addMedia(m, msg, len(m.Parts) > 0)
	if !fillEmpty(m, msg) {
		return nil, nil // a service message
	}
	if err := c.deliver(ctx, m); err != nil {
		c.dedup.Forget(key)
		return nil, err
	}
	return nil, nil
}

// fillEmpty makes sure a message a person sent reaches the agent as something: when
// nothing of it could be shown, it says so. It reports false for service messages
// (members joining, pins, topic changes), which nobody addressed to the bot.
func fillEmpty(m *channels.Message, msg *message) bool {
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

// chatMoved hands the gateway the news that the group old is now the supergroup moved, in
// the new chat's order, under an id that both of Telegram's notices and a refused send
// share: the gateway takes it once, and moves the conversation there.
func (c *Channel) chatMoved(ctx context.Context, old, moved int64) error {
	c.log.Info("telegram: a group was upgraded to a supergroup, which has a new id", "old_chat", old, "new_chat", moved)
	return c.deliver(ctx, &channels.Message{
		ID:          "migrate:" + strconv.FormatInt(old, 10),
		Channel:     Name,
		ChatID:      strconv.FormatInt(moved, 10),
		ChatType:    channels.ChatGroup,
		MigrateFrom: strconv.FormatInt(old, 10),
		Time:        time.Now(),
	})
}

func (c *Channel) deliver(ctx context.Context, m *channels.Message) error {
	c.mu.Lock()
	sink := c.sink
	c.mu.Unlock()
	if err := sink.Deliver(ctx, m); err != nil {
		return fmt.Errorf("telegram: the gateway did not take message %s in chat %s: %w", m.ID, m.ChatID, err)
	}
	return nil
}

// notify answers msg in its chat with plain text (access refusals, media that could not be
// fetched), quoting it in groups. Failures are logged: the update itself is done with.
func (c *Channel) notify(ctx context.Context, msg *message, text string) {
	p := &bot.SendMessageParams{ChatID: msg.Chat.ID, Text: text}
	if msg.IsTopicMessage {
		p.MessageThreadID = msg.MessageThreadID
	}
	if msg.Chat.Type != models.ChatTypePrivate {
		p.ReplyParameters = &models.ReplyParameters{MessageID: msg.ID, AllowSendingWithoutReply: true}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	to, key := c.to(msg.Chat.ID, 30*time.Second)
	err := to.Do(ctx, key, func(ctx context.Context) error {
		_, err := c.sendMessage(ctx, p)
		return err
	})
	if err != nil {
		c.log.Warn("telegram: could not send a notice", "chat", msg.Chat.ID, "err", err)
	}
}

// normalise turns a Telegram message into the gateway's model (text, mention, reply,
// chat type, topic). forUs is false for a command addressed to another bot.
func (c *Channel) normalise(msg *message) (m *channels.Message, forUs bool) {
	me := c.bot()
	m = &channels.Message{
		ID:       strconv.Itoa(msg.ID),
		Channel:  Name,
		ChatID:   strconv.FormatInt(msg.Chat.ID, 10),
		UserID:   strconv.FormatInt(msg.From.ID, 10),
		UserName: userName(msg.From),
		ChatType: channels.ChatGroup,
		Time:     time.Unix(int64(msg.Date), 0),
	}
	if msg.Chat.Type == models.ChatTypePrivate {
		m.ChatType = channels.ChatDM
	}
	if anonymousAdmin(msg) {
		// Telegram shows the group as the author; so does the gateway.
		m.UserID, m.UserName = strconv.FormatInt(msg.SenderChat.ID, 10), msg.SenderChat.Title
		if m.UserName == "" {
			m.UserName = "group admin"
		}
	}
	if msg.IsTopicMessage && msg.MessageThreadID != 0 {
		m.ThreadID = strconv.Itoa(msg.MessageThreadID)
	}
	text, entities := msg.Text, msg.Entities
	if text == "" {
		text, entities = msg.Caption, msg.CaptionEntities
	}
	cmd := bareCommand(text, entities)
	text, m.Mentioned, forUs = c.mentions(text, entities, me)
	if m.ChatType == channels.ChatGroup && !m.Mentioned && c.offers(cmd) {
		m.Mentioned = true // "/stop" picked from the menu in a group with one bot
	}
	if text != "" {
		m.Parts = append(m.Parts, channels.TextPart(text))
	}
	// In a forum every topic message "replies" to the topic's first message; that is
	// not the user answering anyone.
	if r := msg.ReplyToMessage; r != nil && r.ForumTopicCreated == nil {
		rt := r.Text
		if rt == "" {
			rt = r.Caption
		}
		m.ReplyTo = &channels.Reply{ID: strconv.Itoa(r.ID), Text: rt}
		if r.From != nil {
			m.ReplyTo.UserID = strconv.FormatInt(r.From.ID, 10)
			m.ReplyTo.FromBot = r.From.ID == me.ID
		}
		if m.ReplyTo.FromBot {
			m.Mentioned = true
		}
	}
	return m, forUs
}

// mentions finds whether text addresses the bot (an @mention, a text mention, or a
// /command@bot), and removes the bot's @name so the agent and the command parser see
// what the user meant ("/new@bot" becomes "/new"). forUs is false for /command@otherbot.
func (c *Channel) mentions(text string, entities []models.MessageEntity, me models.User) (string, bool, bool) {
	handle := "@" + strings.ToLower(me.Username)
	mentioned, forUs, tagged := false, true, false
	var cut [][2]int // byte ranges to remove
	for _, e := range entities {
		s, from, to := utf16Slice(text, e.Offset, e.Length)
		switch e.Type {
		case models.MessageEntityTypeMention:
			tagged = true
			if me.Username != "" && strings.ToLower(s) == handle {
				mentioned = true
				cut = append(cut, [2]int{from, to})
			}
		case models.MessageEntityTypeTextMention:
			if e.User != nil && e.User.ID == me.ID {
				mentioned = true
			}
		case models.MessageEntityTypeBotCommand:
			if i := strings.IndexByte(s, '@'); i >= 0 {
				if strings.ToLower(s[i:]) == handle {
					mentioned = true
					cut = append(cut, [2]int{from + i, to})
				} else {
					forUs = false
				}
			}
		}
	}
	if !tagged && me.Username != "" && namesHandle(strings.ToLower(text), handle) {
		mentioned = true // clients always send an entity; this catches hand-made updates
	}
	for i := len(cut) - 1; i >= 0; i-- {
		text = text[:cut[i][0]] + text[cut[i][1]:]
	}
	return strings.TrimSpace(text), mentioned, forUs
}

// namesHandle says whether text holds handle as a name of its own: not the start of a
// longer one (@bot_fan) nor the domain of a mail address (help@bot.example.com).
func namesHandle(text, handle string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], handle)
		if j < 0 {
			return false
		}
		from, to := i+j, i+j+len(handle)
		before := from == 0 || !isNameByte(text[from-1])
		rest := text[to:]
		// A full stop ends a sentence ("thanks @bot."), not a domain ("@bot.example").
		rest = strings.TrimPrefix(rest, ".")
		after := rest == "" || !isNameByte(rest[0])
		if before && after {
			return true
		}
		i = from + 1
	}
}

// isNameByte reports whether b may be part of a Telegram username.
func isNameByte(b byte) bool {
	return b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// bareCommand is the name of the command a message starts with when it names no bot
// ("/stop", not "/stop@bot"), or "".
func bareCommand(text string, entities []models.MessageEntity) string {
	for _, e := range entities {
		if e.Type != models.MessageEntityTypeBotCommand || e.Offset != 0 {
			continue
		}
		s, _, _ := utf16Slice(text, e.Offset, e.Length)
		if len(s) > 1 && !strings.Contains(s, "@") {
			return strings.ToLower(s[1:])
		}
	}
	return ""
}

// offers says whether name is a command in one of the bot's menus.
func (c *Channel) offers(name string) bool {
	if name == "" {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offered[name]
}

// utf16Slice returns the part of s at Telegram's UTF-16 offset and length, and its byte range.
func utf16Slice(s string, off, length int) (string, int, int) {
	from, to, units := -1, len(s), 0
	for i, r := range s {
		if units == off && from < 0 {
			from = i
		}
		if units == off+length {
			to = i
			break
		}
		units += utf16.RuneLen(r)
	}
	if from < 0 {
		return "", len(s), len(s)
	}
	return s[from:to], from, to
}

// anonymousAdmin reports a message a group's admin sent as the group itself ("remain
// anonymous"): From is then Telegram's placeholder bot and SenderChat the group. A post a
// linked channel forwards into its discussion group has SenderChat the channel, and stays
// out, as channel posts do.
func anonymousAdmin(msg *message) bool {
	return msg.SenderChat != nil && msg.SenderChat.ID == msg.Chat.ID && msg.Chat.Type != models.ChatTypePrivate
}

func userName(u *models.User) string {
	if u.Username != "" {
		return u.Username
	}
	return strings.TrimSpace(u.FirstName + " " + u.LastName)
}
