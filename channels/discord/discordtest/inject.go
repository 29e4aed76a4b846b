package discordtest

import (
	"encoding/base64"
	"strings"
	"time"
)

// Incoming is a message a user (or another bot) sends, for Inject.
type Incoming struct {
	ID           string // reuse the id of an earlier Inject to deliver the same message again
	ChannelID    string // the DM or guild channel
	ThreadID     string // when set, the message is in this thread of ChannelID
	Guild        bool   // a guild channel; otherwise a DM with To
	To           string // the bot a DM goes to (default: the first bot)
	AuthorID     string
	AuthorBot    bool
	Content      string
	MentionBot   bool     // prefix the content with <@bot> (bot: To, or the first bot)
	Mentions     []string // more mentioned user ids; add <@id> to Content yourself
	MentionRoles []string // role ids; add <@&id> to Content yourself
	ReplyTo      string   // a message id in the same channel
	Files        []File
	Voice        bool // Files[0] is a voice message (flag IS_VOICE_MESSAGE, audio/ogg)
}

// Inject stores in as a new message (or redelivers it, when in.ID is known), dispatches
// MESSAGE_CREATE and returns the message id.
func (s *Server) Inject(in Incoming) string {
	s.mu.Lock()
	if m := s.messages[in.ID]; in.ID != "" && m != nil {
		s.mu.Unlock()
		s.dispatchMessage(m)
		return m.ID
	}
	to := in.To
	if to == "" {
		to = s.bots[0].ID
	}
	chID := in.ChannelID
	c := s.channels[chID]
	if c == nil {
		c = &channel{id: chID, typ: 1, dmBot: to}
		if in.Guild {
			c = &channel{id: chID, typ: 0, guildID: s.guildID}
		}
		s.channels[chID] = c
	}
	if in.ThreadID != "" {
		if s.channels[in.ThreadID] == nil {
			s.channels[in.ThreadID] = &channel{id: in.ThreadID, typ: 11, guildID: c.guildID, parentID: chID}
		}
		c = s.channels[in.ThreadID]
	}
	m := &Message{
		ID: in.ID, ChannelID: c.id, ParentID: c.parentID, GuildID: c.guildID,
		AuthorID: in.AuthorID, AuthorBot: in.AuthorBot || s.isBotLocked(in.AuthorID),
		Content: in.Content, Files: in.Files, ReferenceID: in.ReplyTo, Time: time.Now(),
		Mentions: append([]string{}, in.Mentions...), MentionRoles: in.MentionRoles,
	}
	if m.ID == "" {
		m.ID = s.newIDLocked()
	}
	m.AuthorName = s.userLocked(m.AuthorID).Username
	if in.MentionBot {
		m.Content = "<@" + to + "> " + m.Content
		m.Mentions = append(m.Mentions, to)
	}
	if ref := s.messages[in.ReplyTo]; ref != nil {
		// A reply pings the author of the message it answers, as the Discord client does by default.
		m.Mentions = append(m.Mentions, ref.AuthorID)
	}
	if in.Voice && len(m.Files) > 0 {
		m.Flags |= FlagVoiceMessage
		f := &m.Files[0]
		if f.ContentType == "" {
			f.ContentType = "audio/ogg"
		}
		if f.Name == "" {
			f.Name = "voice-message.ogg"
		}
		if f.DurationSecs == 0 {
			f.DurationSecs = 1
		}
		if f.Waveform == "" {
			f.Waveform = base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x80", 10)))
		}
	}
	s.storeLocked(m)
	s.mu.Unlock()
	s.dispatchMessage(m)
	return m.ID
}

// InjectDM sends text from user to the first bot in DM channel chatID.
func (s *Server) InjectDM(chatID, userID, text string) string {
	return s.Inject(Incoming{ChannelID: chatID, AuthorID: userID, Content: text})
}

// InjectGuild sends text from user in guild channel chatID, mentioning the first bot or not.
func (s *Server) InjectGuild(chatID, userID, text string, mention bool) string {
	return s.Inject(Incoming{ChannelID: chatID, Guild: true, AuthorID: userID, Content: text, MentionBot: mention})
}

// InjectThread sends text from user in thread threadID of guild channel parentID.
func (s *Server) InjectThread(parentID, threadID, userID, text string, mention bool) string {
	return s.Inject(Incoming{ChannelID: parentID, ThreadID: threadID, Guild: true, AuthorID: userID, Content: text, MentionBot: mention})
}

// InjectVoice sends a voice message with the given Ogg bytes, in a DM or (guild) in a
// guild channel mentioning the first bot.
func (s *Server) InjectVoice(chatID, userID string, ogg []byte, durationSecs float64, guild bool) string {
	return s.Inject(Incoming{ChannelID: chatID, Guild: guild, MentionBot: guild, AuthorID: userID, Voice: true,
		Files: []File{{Name: "voice-message.ogg", ContentType: "audio/ogg", Data: ogg, DurationSecs: durationSecs}}})
}

// InjectReply sends text from user in chatID as a reply to message replyTo.
func (s *Server) InjectReply(chatID, userID, replyTo, text string, guild bool) string {
	return s.Inject(Incoming{ChannelID: chatID, Guild: guild, AuthorID: userID, Content: text, ReplyTo: replyTo})
}
