package discordtest

import (
	"encoding/json"
	"fmt"
	"time"
)

// InjectRaw dispatches d, the data of a MESSAGE_CREATE as Discord's gateway sends it
// (a payload captured from the real platform, say), byte for byte. The fake reads only
// what it needs to route it: id, channel_id, guild_id and author. A channel it does not
// know yet becomes a guild channel when guild_id is set, else a DM with the first bot.
// The message is stored, so that replies to it and Messages see it. It returns the id.
func (s *Server) InjectRaw(d []byte) (string, error) {
	var head struct {
		ID        string `json:"id"`
		ChannelID string `json:"channel_id"`
		GuildID   string `json:"guild_id"`
		Content   string `json:"content"`
		Flags     int    `json:"flags"`
		Author    struct {
			ID       string `json:"id"`
			Username string `json:"username"`
			Bot      bool   `json:"bot"`
		} `json:"author"`
	}
	if err := json.Unmarshal(d, &head); err != nil {
		return "", fmt.Errorf("discordtest: InjectRaw: %w", err)
	}
	if head.ID == "" || head.ChannelID == "" || head.Author.ID == "" {
		return "", fmt.Errorf("discordtest: InjectRaw: the payload lacks id, channel_id or author.id")
	}
	s.mu.Lock()
	c := s.channels[head.ChannelID]
	if c == nil {
		c = &channel{id: head.ChannelID, typ: 1, dmBot: s.bots[0].ID}
		if head.GuildID != "" {
			c = &channel{id: head.ChannelID, typ: 0, guildID: head.GuildID}
		}
		s.channels[head.ChannelID] = c
	}
	m := &Message{ID: head.ID, ChannelID: c.id, ParentID: c.parentID, GuildID: head.GuildID,
		AuthorID: head.Author.ID, AuthorName: head.Author.Username, AuthorBot: head.Author.Bot,
		Content: head.Content, Flags: head.Flags, Time: time.Now()}
	if s.messages[m.ID] == nil {
		s.storeLocked(m)
	}
	var targets []*session
	for _, ss := range s.sessions {
		if head.GuildID != "" {
			if ss.intents&IntentGuildMessages != 0 {
				targets = append(targets, ss)
			}
		} else if ss.intents&IntentDirectMessages != 0 && (ss.bot.ID == c.dmBot || ss.bot.ID == head.Author.ID) {
			targets = append(targets, ss)
		}
	}
	s.mu.Unlock()
	s.dispatchMu.Lock()
	defer s.dispatchMu.Unlock()
	for _, ss := range targets {
		ss.dispatch("MESSAGE_CREATE", json.RawMessage(d))
	}
	return head.ID, nil
}

// HostFile serves f as an attachment would be served and returns its URL, for the
// attachments of payloads given to InjectRaw.
func (s *Server) HostFile(f File) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A message of its own, in no channel anyone lists: only its URL leads to it.
	m := &Message{ID: s.newIDLocked(), Files: []File{f}, Time: time.Now()}
	m.ChannelID = s.newIDLocked()
	s.messages[m.ID] = m
	return s.attachmentURL(m, 0)
}

// SetRoleName names a role of the guild (GET /guilds/{g}/roles).
func (s *Server) SetRoleName(id, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roleNames[id] = name
}
