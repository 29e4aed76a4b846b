package slacktest

import (
	"encoding/json"
	"fmt"
	"time"
)

// UserMessage is a message a user sends, as the fake turns it into events.
type UserMessage struct {
	Channel     string // channel id
	ChannelType string // "im" (default), "channel", "group" or "mpim"
	User        string
	Text        string
	ThreadTS    string // set for a reply in a thread
	TS          string // "" lets the fake choose; an earlier message's ts redelivers its events
	Mention     bool   // starts the text with <@BotUserID> and adds an app_mention event
	Files       []UserFile
	BotID       string // set to send as another bot (bot_message)
	SubType     string
	// Attachments are added to the event as they are: a forwarded message is one with
	// is_share and the forwarded text.
	Attachments []map[string]any
}

// UserFile is a file attached to a user's message.
type UserFile struct {
	Name      string
	MIME      string
	Data      []byte
	AudioClip bool // recorded in Slack as an audio clip (media_display_type audio)
	Size      int  // the size Slack announces; 0 means len(Data)
	// Mode is Slack's file mode: "" is "hosted"; "external" (a linked Google Drive file)
	// and "hidden_by_limit" (past a free plan's history) come without a download URL.
	Mode string
}

type injected struct {
	user   string
	events []injectedEvent
}

type injectedEvent struct {
	id, typ string
	payload json.RawMessage
}

// Send injects m and returns its ts. A channel message that mentions the bot produces two
// events, message and app_mention, as Slack sends both to an app subscribed to both.
func (s *Server) Send(m UserMessage) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.TS != "" {
		if prev := s.sent[m.Channel+":"+m.TS]; prev != nil {
			for _, e := range prev.events {
				s.deliver(e, 1)
			}
			return m.TS
		}
	}
	ts := m.TS
	if ts == "" {
		ts = s.nextTS()
	}
	if m.ChannelType == "" {
		m.ChannelType = "im"
	}
	// The bot sees the conversation (an event came from it), and may DM the user by id.
	s.known[m.Channel] = true
	if m.User != "" {
		s.known[m.User] = true
	}
	text := m.Text
	if m.Mention {
		text = "<@" + BotUserID + "> " + text
	}
	ev := map[string]any{
		"type": "message", "channel": m.Channel, "channel_type": m.ChannelType, "user": m.User,
		"text": text, "ts": ts, "event_ts": ts, "team": TeamID,
		"client_msg_id": fmt.Sprintf("cmid-%s-%s", m.Channel, ts),
	}
	if m.ThreadTS != "" {
		ev["thread_ts"] = m.ThreadTS
		if root := s.byKey[m.Channel+":"+m.ThreadTS]; root != nil {
			ev["parent_user_id"] = root.user
		}
	}
	if m.BotID != "" {
		ev["bot_id"] = m.BotID
		if m.SubType == "" {
			m.SubType = "bot_message"
		}
	}
	var files []map[string]any
	for _, f := range m.Files {
		id := s.nextID("FU")
		size := f.Size
		if size == 0 {
			size = len(f.Data)
		}
		u := fmt.Sprintf("%s/files/%s/%s", s.URL, id, f.Name)
		file := map[string]any{
			"id": id, "name": f.Name, "title": f.Name, "mimetype": f.MIME, "size": size, "mode": "hosted",
			"url_private": u, "url_private_download": u + "?download=1", "user": m.User,
			"permalink": s.URL + "/archives/" + m.Channel + "/" + id,
		}
		if f.Mode != "" && f.Mode != "hosted" {
			file["mode"] = f.Mode
			delete(file, "url_private")
			delete(file, "url_private_download")
			file["is_external"] = f.Mode == "external"
		}
		if f.AudioClip {
			file["media_display_type"] = "audio"
			file["subtype"] = "slack_audio"
		}
		files = append(files, file)
		s.userFiles[id] = &File{ID: id, Name: f.Name, MIME: f.MIME, Data: f.Data}
	}
	if len(files) > 0 {
		ev["files"] = files
		ev["upload"] = false
		if m.SubType == "" {
			m.SubType = "file_share"
		}
	}
	if m.SubType != "" {
		ev["subtype"] = m.SubType
	}
	if len(m.Attachments) > 0 {
		ev["attachments"] = m.Attachments
	}
	rec := &injected{user: m.User}
	rec.events = append(rec.events, s.callback(ev))
	if m.Mention && m.ChannelType != "im" {
		mention := map[string]any{
			"type": "app_mention", "channel": m.Channel, "user": m.User, "text": text, "ts": ts, "event_ts": ts,
			"team": TeamID, "client_msg_id": ev["client_msg_id"],
		}
		for _, k := range []string{"thread_ts", "files", "bot_id"} {
			if v, ok := ev[k]; ok {
				mention[k] = v
			}
		}
		rec.events = append(rec.events, s.callback(mention))
	}
	s.sent[m.Channel+":"+ts] = rec
	// The user's message is in the channel too, so that reactions and threads can refer to it.
	s.addMessage(&message{user: m.User, Posted: Posted{Channel: m.Channel, TS: ts, ThreadTS: m.ThreadTS, Text: text, Time: time.Now()}})
	for _, e := range rec.events {
		s.deliver(e, 0)
	}
	return ts
}

// callback wraps an inner event in an event_callback with a fresh event_id; call with mu held.
func (s *Server) callback(inner map[string]any) injectedEvent {
	id := s.nextID("Ev")
	b, _ := json.Marshal(map[string]any{
		"token": "", "team_id": TeamID, "api_app_id": AppID, "type": "event_callback",
		"event_id": id, "event_time": time.Now().Unix(), "event": inner,
		"authorizations": []map[string]any{{"team_id": TeamID, "user_id": BotUserID, "is_bot": true}},
	})
	return injectedEvent{id: id, typ: inner["type"].(string), payload: b}
}

// deliver hands one event to Socket Mode or the Events API; call with mu held.
func (s *Server) deliver(e injectedEvent, retry int) {
	if s.httpEvents.target != "" {
		s.deliverHTTP(e.id, e.payload, retry)
		return
	}
	s.enqueue(e.id, e.typ, e.payload, retry)
	s.poke()
}

// DM sends text from user in the direct message channel.
func (s *Server) DM(channel, user, text string) string {
	return s.Send(UserMessage{Channel: channel, ChannelType: "im", User: user, Text: text})
}

// ChannelMessage sends text from user to a channel, mentioning the bot or not.
func (s *Server) ChannelMessage(channel, user, text string, mention bool) string {
	return s.Send(UserMessage{Channel: channel, ChannelType: "channel", User: user, Text: text, Mention: mention})
}

// ThreadReply sends text from user in the thread under threadTS of a channel.
func (s *Server) ThreadReply(channel, threadTS, user, text string, mention bool) string {
	return s.Send(UserMessage{Channel: channel, ChannelType: "channel", ThreadTS: threadTS, User: user, Text: text, Mention: mention})
}

// AudioClip sends an audio clip recorded in Slack from user in a direct message channel.
func (s *Server) AudioClip(channel, user string, data []byte, mime string) string {
	ext := map[string]string{"audio/ogg": ".ogg", "audio/webm": ".webm", "audio/mp4": ".m4a", "audio/mpeg": ".mp3"}[mime]
	if ext == "" {
		ext = ".bin"
	}
	return s.Send(UserMessage{Channel: channel, ChannelType: "im", User: user,
		Files: []UserFile{{Name: "audio_message" + ext, MIME: mime, Data: data, AudioClip: true}}})
}

// Redeliver sends the events of an earlier message again with their original event ids,
// as Slack does when it did not see an acknowledgement: as new envelopes in Socket Mode,
// and with X-Slack-Retry-Num 1 (reason http_timeout) over the Events API.
func (s *Server) Redeliver(channel, ts string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev := s.sent[channel+":"+ts]; prev != nil {
		for _, e := range prev.events {
			s.deliver(e, 1)
		}
	}
}
