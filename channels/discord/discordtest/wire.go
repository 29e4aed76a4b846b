package discordtest

import (
	"net/url"
	"strconv"
	"time"
)

// The JSON shapes below follow Discord's API reference; they are written out here, not
// borrowed from discordgo, so that the fake checks the client rather than agreeing with it.

type wireUser struct {
	ID         string `json:"id"`
	Username   string `json:"username"`
	GlobalName string `json:"global_name,omitempty"`
	Bot        bool   `json:"bot,omitempty"`
}

type wireAttachment struct {
	ID           string   `json:"id"`
	Filename     string   `json:"filename"`
	Size         int      `json:"size"`
	URL          string   `json:"url"`
	ProxyURL     string   `json:"proxy_url"`
	ContentType  string   `json:"content_type,omitempty"`
	DurationSecs *float64 `json:"duration_secs,omitempty"`
	Waveform     string   `json:"waveform,omitempty"`
}

type wireReference struct {
	MessageID       string `json:"message_id,omitempty"`
	ChannelID       string `json:"channel_id,omitempty"`
	GuildID         string `json:"guild_id,omitempty"`
	FailIfNotExists *bool  `json:"fail_if_not_exists,omitempty"`
}

type wireMessage struct {
	ID                string           `json:"id"`
	ChannelID         string           `json:"channel_id"`
	GuildID           string           `json:"guild_id,omitempty"`
	Author            wireUser         `json:"author"`
	Content           string           `json:"content"`
	Timestamp         string           `json:"timestamp"`
	EditedTimestamp   *string          `json:"edited_timestamp"`
	TTS               bool             `json:"tts"`
	MentionEveryone   bool             `json:"mention_everyone"`
	Mentions          []wireUser       `json:"mentions"`
	MentionRoles      []string         `json:"mention_roles"`
	Attachments       []wireAttachment `json:"attachments"`
	Embeds            []any            `json:"embeds"`
	Pinned            bool             `json:"pinned"`
	Type              int              `json:"type"`
	Flags             int              `json:"flags"`
	MessageReference  *wireReference   `json:"message_reference,omitempty"`
	ReferencedMessage *wireMessage     `json:"referenced_message,omitempty"`
}

type wireChannel struct {
	ID       string `json:"id"`
	Type     int    `json:"type"`
	GuildID  string `json:"guild_id,omitempty"`
	ParentID string `json:"parent_id,omitempty"`
	Name     string `json:"name,omitempty"`
}

func (s *Server) userLocked(id string) wireUser {
	if b, ok := s.botByIDLocked(id); ok {
		return wireUser{ID: b.ID, Username: b.Name, Bot: true}
	}
	return wireUser{ID: id, Username: userName(id), GlobalName: "User " + id}
}

// wireLocked renders m as recipient bot sees it. Without the MESSAGE_CONTENT intent a bot
// gets no content or attachments of guild messages that do not mention it (Discord's rule).
func (s *Server) wireLocked(m *Message, recipient string, intents int, depth int) wireMessage {
	w := wireMessage{
		ID:           m.ID,
		ChannelID:    m.ChannelID,
		GuildID:      m.GuildID,
		Author:       s.userLocked(m.AuthorID),
		Content:      m.Content,
		Timestamp:    m.Time.UTC().Format(time.RFC3339Nano),
		Mentions:     []wireUser{},
		MentionRoles: append([]string{}, m.MentionRoles...),
		Attachments:  []wireAttachment{},
		Embeds:       []any{},
		Flags:        m.Flags,
	}
	w.Author.Bot = w.Author.Bot || m.AuthorBot
	if n := len(m.EditTimes); n > 0 {
		ts := m.EditTimes[n-1].UTC().Format(time.RFC3339Nano)
		w.EditedTimestamp = &ts
	}
	mentioned := false
	for _, id := range m.Mentions {
		w.Mentions = append(w.Mentions, s.userLocked(id))
		mentioned = mentioned || id == recipient
	}
	for i, f := range m.Files {
		a := wireAttachment{
			ID:          m.ID + strconv.Itoa(i),
			Filename:    f.Name,
			Size:        len(f.Data),
			URL:         s.attachmentURL(m, i),
			ContentType: f.ContentType,
			Waveform:    f.Waveform,
		}
		a.ProxyURL = a.URL
		if f.DurationSecs > 0 {
			d := f.DurationSecs
			a.DurationSecs = &d
		}
		w.Attachments = append(w.Attachments, a)
	}
	if m.ReferenceID != "" {
		w.Type = 19 // REPLY
		w.MessageReference = &wireReference{MessageID: m.ReferenceID, ChannelID: m.ChannelID, GuildID: m.GuildID}
		if ref := s.messages[m.ReferenceID]; ref != nil && depth == 0 {
			r := s.wireLocked(ref, recipient, intents, depth+1)
			w.ReferencedMessage = &r
		}
	}
	if m.GuildID != "" && intents&IntentMessageContent == 0 && !mentioned && m.AuthorID != recipient {
		w.Content, w.Attachments = "", []wireAttachment{}
	}
	return w
}

func (s *Server) attachmentURL(m *Message, i int) string {
	return s.URL + "/attachments/" + m.ChannelID + "/" + m.ID + "/" + strconv.Itoa(i) + "/" + url.PathEscape(m.Files[i].Name) +
		"?ex=" + strconv.Itoa(s.urlGen)
}

func (c *channel) wire() wireChannel {
	return wireChannel{ID: c.id, Type: c.typ, GuildID: c.guildID, ParentID: c.parentID, Name: "chan-" + c.id}
}
