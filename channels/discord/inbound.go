package discord

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/bwmarrin/discordgo"

	"gateway/channels"
)

type chanInfo struct {
	thread bool
	parent string
}

// work normalises and delivers inbound messages, one at a time, in gateway order.
func (c *Channel) work(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-ctx.Done():
			return
		case in := <-c.inbox:
			switch {
			case in.done != nil:
				close(in.done) // what came before it is handled
			case in.catchUp:
				c.catchUp(ctx)
			default:
				c.handle(ctx, in.m)
			}
		}
	}
}

func (c *Channel) handle(ctx context.Context, dm *discordgo.Message) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("discord: panic while handling a message", "message_id", dm.ID, "panic", r)
		}
	}()
	bot := c.bot()
	// The cursor passes a message once it is done with: taken by the gateway, or not for
	// it. One the gateway refused holds the cursor before it instead (see below).
	refused := false
	defer func() {
		if !refused {
			c.book.saw(dm.ChannelID, dm.ID)
		}
	}()
	if dm.Author == nil || dm.Author.ID == bot {
		return
	}
	if dm.Type != discordgo.MessageTypeDefault && dm.Type != discordgo.MessageTypeReply {
		return // joins, pins, thread starters...
	}
	if c.dedup.Seen(dm.ID) {
		c.log.Debug("discord: dropped a redelivered message", "message_id", dm.ID)
		return
	}
	isBot := dm.Author.Bot || dm.WebhookID != ""
	if isBot && !c.cfg.AllowBots {
		return
	}
	msg, opts := c.normalise(ctx, dm, bot)
	chat := msg.ChatID + "/" + msg.ThreadID
	if !isBot {
		c.guard.human(chat)
	}
	switch c.cfg.Access.Check(msg) {
	case channels.NotAllowed:
		c.log.Info("discord: message from a user not on allow_from", "user_id", msg.UserID, "chat_id", msg.ChatID)
		if msg.ChatType == channels.ChatDM && !isBot && c.strangers.Allow(msg.UserID, time.Now()) {
			c.tellStranger(msg)
		}
		return
	case channels.NotMentioned:
		return
	}
	if isBot && !c.guard.allow(chat, time.Now()) {
		c.log.Info("discord: ignoring bots in this chat until a human writes", "chat_id", msg.ChatID, "thread_id", msg.ThreadID, "limit", BotStreak)
		return
	}
	if msg.ReplyTo != nil && dm.ReferencedMessage != nil {
		ro := opts
		ro.mentions, ro.stripBot = dm.ReferencedMessage.Mentions, false
		msg.ReplyTo.Text = c.summary(ctx, dm.ReferencedMessage, ro)
	}
	// Attachments go as references, downloaded by Fetch on the chat's own session: this
	// worker reads every chat's messages in order and must not wait on a download.
	for _, p := range c.content(ctx, dm, msg, opts) {
		msg.Parts = append(msg.Parts, p)
		msg.IsVoice = msg.IsVoice || p.Voice
	}
	tracked := msg.ChatType == channels.ChatDM || msg.ThreadID != "" // read again after a lost session
	if err := c.sink.Deliver(ctx, msg); err != nil {
		c.dedup.Forget(dm.ID)
		if tracked {
			// Discord never sends it again: only a catch-up can read it back.
			refused = true
			c.book.refused(dm.ChannelID, dm.GuildID, dm.ID, time.Now())
		}
		c.log.Warn("discord: the gateway did not take a message", "message_id", dm.ID, "read_again_at_catch_up", tracked, "err", err)
		return
	}
	if tracked {
		c.book.took(dm.ChannelID, dm.GuildID, dm.ID, time.Now())
	}
}

// normalise maps a Discord message onto the message model, all but its parts (content
// adds them once the message is known to be for the bot), and says how to read its markup.
func (c *Channel) normalise(ctx context.Context, dm *discordgo.Message, bot string) (*channels.Message, textOpts) {
	msg := &channels.Message{
		ID:       dm.ID,
		Channel:  Name,
		ChatID:   dm.ChannelID,
		UserID:   dm.Author.ID,
		UserName: dm.Author.GlobalName,
		ChatType: channels.ChatDM,
		Time:     dm.Timestamp,
	}
	if msg.UserName == "" {
		msg.UserName = dm.Author.Username
	}
	if msg.Time.IsZero() {
		msg.Time = time.Now()
	}
	var botRoles []string
	if dm.GuildID != "" {
		msg.ChatType = channels.ChatGroup
		// A thread is a channel of its own; the session key wants parent and thread.
		if info, ok := c.channelInfo(ctx, dm.ChannelID); ok && info.thread && info.parent != "" {
			msg.ChatID, msg.ThreadID = info.parent, dm.ChannelID
		}
		if len(dm.MentionRoles) > 0 {
			botRoles = c.botRoles(ctx, dm.GuildID, bot)
		}
	}
	for _, u := range dm.Mentions {
		msg.Mentioned = msg.Mentioned || (u != nil && u.ID == bot)
	}
	msg.Mentioned = msg.Mentioned || strings.Contains(dm.Content, "<@"+bot+">") || strings.Contains(dm.Content, "<@!"+bot+">")
	for _, r := range dm.MentionRoles {
		msg.Mentioned = msg.Mentioned || slices.Contains(botRoles, r)
	}
	// A forward carries a message_reference too (type 1), but answers nothing: its
	// content is in message_snapshots, read by content.
	if ref := dm.MessageReference; ref != nil && ref.MessageID != "" && ref.Type == discordgo.MessageReferenceTypeDefault {
		r := &channels.Reply{ID: ref.MessageID}
		if rm := dm.ReferencedMessage; rm != nil {
			if rm.Author != nil {
				r.UserID = rm.Author.ID
				r.FromBot = rm.Author.ID == bot
			}
		}
		msg.ReplyTo = r
		msg.Mentioned = msg.Mentioned || r.FromBot
	}
	lookups := maxNameLookups
	return msg, textOpts{mentions: dm.Mentions, guild: dm.GuildID, bot: bot, botRoles: botRoles, stripBot: true, lookups: &lookups}
}

// content builds a message's parts: the user's words (markup made plain) and descriptions
// of what has no words, the attachments (as references, see Fetch), then each forwarded
// message with its own attachments. It never comes back empty: a message the bot was sent
// is always passed on. discordgo v0.29.0 decodes message_snapshots, sticker_items and poll itself.
func (c *Channel) content(ctx context.Context, dm *discordgo.Message, msg *channels.Message, o textOpts) []channels.Part {
	var parts []channels.Part
	var lines []string
	if t := c.plainText(ctx, dm.Content, o); t != "" {
		lines = append(lines, t)
	}
	lines = append(lines, c.notes(ctx, dm, o, "The user sent")...)
	text := len(lines) > 0 // what the user sent besides files; forward headers are ours
	if text {
		parts = append(parts, channels.TextPart(strings.Join(lines, "\n")))
	}
	n := 0 // numbers the files of this message
	parts = append(parts, attachmentRefs(dm.ChannelID, dm.ID, dm.Attachments, dm.Flags&discordgo.MessageFlagsIsVoiceMessage != 0, &n)...)
	for _, s := range dm.MessageSnapshots {
		fm := s.Message
		if fm == nil {
			continue
		}
		fo := o
		fo.mentions, fo.stripBot, fo.guild = fm.Mentions, false, ""
		if ref := dm.MessageReference; ref != nil {
			fo.guild = ref.GuildID // where the forwarded message's roles live
		}
		var body []string
		if t := c.plainText(ctx, fm.Content, fo); t != "" {
			body = append(body, t)
		}
		body = append(body, c.notes(ctx, fm, fo, "")...)
		text = text || len(body) > 0
		parts = append(parts, channels.TextPart(forwardHeader(body, len(fm.Attachments))))
		// A forwarded voice message is audio to transcribe, but the user did not speak.
		parts = append(parts, attachmentRefs(dm.ChannelID, dm.ID, fm.Attachments, false, &n)...)
	}
	if text {
		markText(parts)
	}
	if len(parts) == 0 {
		what := "[The user sent a message with nothing in it that can be shown as text]"
		if msg.ChatType == channels.ChatGroup && msg.Mentioned {
			what = "[The user mentioned you without writing anything else]"
		}
		parts = append(parts, channels.TextPart(what))
	}
	return parts
}

func (c *Channel) channelInfo(ctx context.Context, id string) (chanInfo, bool) {
	if v, ok := c.chans.get(id); ok {
		return v, true
	}
	var ch *discordgo.Channel
	err := c.call(ctx, "", "look up a channel", func(ctx context.Context) (err error) {
		ch, err = c.s.Channel(id, discordgo.WithContext(ctx))
		return err
	})
	if err != nil {
		c.log.Warn("discord: channel lookup failed; treating it as a plain channel", "channel_id", id, "err", err)
		return chanInfo{}, false
	}
	info := chanInfo{thread: ch.IsThread(), parent: ch.ParentID}
	c.chans.put(id, info)
	return info, true
}

// botRoles lists the roles the bot holds in a guild: mentioning one of them mentions the bot.
func (c *Channel) botRoles(ctx context.Context, guild, bot string) []string {
	if v, ok := c.roles.get(guild); ok {
		return v
	}
	var m *discordgo.Member
	err := c.call(ctx, "", "look up the bot's roles", func(ctx context.Context) (err error) {
		m, err = c.s.GuildMember(guild, bot, discordgo.WithContext(ctx))
		return err
	})
	if err != nil {
		c.log.Warn("discord: role lookup failed", "guild_id", guild, "err", err)
		return nil
	}
	c.roles.put(guild, m.Roles)
	return m.Roles
}

// tellStranger sends the not-allowed notice off the intake worker (channels.Notices).
func (c *Channel) tellStranger(msg *channels.Message) {
	if !c.strangers.Tell(&c.notices, c.life, c.log, msg.UserID, func(ctx context.Context, text string) { c.notice(ctx, msg, text) }) {
		c.log.Warn("discord: too many notices in flight; one was not sent", "chat_id", msg.ChatID)
	}
}

// notice answers msg with a short plain text (not allowed, file too large...).
func (c *Channel) notice(ctx context.Context, msg *channels.Message, text string) {
	st, err := c.Open(ctx, channels.TargetOf(msg))
	if err == nil {
		err = st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: text})
	}
	if err != nil {
		c.log.Warn("discord: could not send a notice", "chat_id", msg.ChatID, "err", err)
	}
}
