package telegramtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-telegram/bot/models"
)

// UserID is who sends injected messages unless Update.From says otherwise.
const UserID = 1001

// Update is something a user does, turned into a Bot API update by Send.
type Update struct {
	UpdateID  int64 // 0: the next id
	MessageID int   // 0: a new message; reuse an id to model the same message delivered again
	ChatID    int64 // > 0: a private chat; < 0: a group (a forum when ThreadID is set)
	ThreadID  int   // forum topic
	From      *models.User
	Text      string
	Caption   string
	Mention   bool // the text starts with @<bot username>, with a mention entity
	ReplyTo   *models.Message

	Voice        []byte
	VoiceMIME    string // default audio/ogg
	Audio        []byte
	AudioName    string
	AudioMIME    string
	VideoNote    []byte
	Photo        []byte
	Document     []byte
	DocumentName string
	DocumentMIME string
	// FileSize, when set, is the size Telegram claims for the media, so that tests can
	// send "a 31 MB voice note" without 31 MB of bytes.
	FileSize int64
	// DownloadStatus, when set, is the HTTP status the media's download answers (404: the
	// file server lost it). FileGone makes getFile refuse the file (expired file_id).
	DownloadStatus int
	FileGone       bool
	// MediaGroupID puts the message in an album: Telegram sends each item of an album as
	// its own update, sharing this id, with the caption on one of them.
	MediaGroupID string
	// Edit, when set, changes the message before it is queued (for content the fields
	// above do not cover: a dice, a poll, a venue, ...).
	Edit func(m *models.Message)
}

// Send queues u for the bot and returns its update and message ids.
func (s *Server) Send(u Update) (updateID int64, messageID int) {
	from := models.User{ID: UserID, FirstName: "Alice", Username: "alice"}
	if u.From != nil {
		from = *u.From
	}
	s.mu.Lock()
	if u.MessageID == 0 {
		s.nextMsg++
		u.MessageID = s.nextMsg
	}
	s.mu.Unlock()
	m := &models.Message{ID: u.MessageID, Date: int(time.Now().Unix()), From: &from, Chat: chatOf(u.ChatID, u.ThreadID),
		ReplyToMessage: u.ReplyTo, Caption: u.Caption, MediaGroupID: u.MediaGroupID}
	if u.ChatID > 0 {
		m.Chat.FirstName, m.Chat.Username = from.FirstName, from.Username
	}
	if u.ThreadID != 0 {
		m.MessageThreadID, m.IsTopicMessage = u.ThreadID, true
	}
	text := u.Text
	if u.Mention {
		mention := "@" + BotUsername
		text = mention + " " + text
		m.Entities = append(m.Entities, models.MessageEntity{Type: models.MessageEntityTypeMention, Offset: 0, Length: UTF16Len(mention)})
	}
	m.Text = text
	if strings.HasPrefix(text, "/") {
		cmd, _, _ := strings.Cut(text, " ")
		m.Entities = append(m.Entities, models.MessageEntity{Type: models.MessageEntityTypeBotCommand, Offset: 0, Length: UTF16Len(cmd)})
	}
	size := func(b []byte) int64 {
		if u.FileSize > 0 {
			return u.FileSize
		}
		return int64(len(b))
	}
	var ids []string
	if u.Voice != nil {
		mt := u.VoiceMIME
		if mt == "" {
			mt = "audio/ogg"
		}
		id := s.AddFile(u.Voice, size(u.Voice), "voice", ".oga")
		ids = append(ids, id)
		m.Voice = &models.Voice{FileID: id, FileUniqueID: "u" + id, Duration: 2, MimeType: mt, FileSize: size(u.Voice)}
	}
	if u.Audio != nil {
		id := s.AddFile(u.Audio, size(u.Audio), "music", ".mp3")
		ids = append(ids, id)
		m.Audio = &models.Audio{FileID: id, FileUniqueID: "u" + id, Duration: 3, FileName: u.AudioName, MimeType: u.AudioMIME, FileSize: size(u.Audio)}
	}
	if u.VideoNote != nil {
		id := s.AddFile(u.VideoNote, size(u.VideoNote), "video_notes", ".mp4")
		ids = append(ids, id)
		m.VideoNote = &models.VideoNote{FileID: id, FileUniqueID: "u" + id, Length: 240, Duration: 2, FileSize: int(size(u.VideoNote))}
	}
	if u.Photo != nil {
		small := s.AddFile(u.Photo[:min(len(u.Photo), 16)], int64(min(len(u.Photo), 16)), "photos", ".jpg")
		id := s.AddFile(u.Photo, size(u.Photo), "photos", ".jpg")
		ids = append(ids, id)
		m.Photo = []models.PhotoSize{
			{FileID: small, FileUniqueID: "u" + small, Width: 90, Height: 90, FileSize: min(len(u.Photo), 16)},
			{FileID: id, FileUniqueID: "u" + id, Width: 1280, Height: 960, FileSize: int(size(u.Photo))},
		}
	}
	if u.Document != nil {
		id := s.AddFile(u.Document, size(u.Document), "documents", "")
		ids = append(ids, id)
		m.Document = &models.Document{FileID: id, FileUniqueID: "u" + id, FileName: u.DocumentName, MimeType: u.DocumentMIME, FileSize: size(u.Document)}
	}
	s.breakFiles(ids, u.DownloadStatus, u.FileGone) // before the bot can see the update
	if u.Edit != nil {
		u.Edit(m)
	}
	return s.SendRaw(models.Update{ID: u.UpdateID, Message: m}), u.MessageID
}

// breakFiles makes the given files fail to download with status, or getFile refuse them.
func (s *Server) breakFiles(ids []string, status int, gone bool) {
	if status == 0 && !gone {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		f := s.files[id]
		f.downloadStatus, f.gone = status, gone
		s.files[id] = f
	}
}

// SendRaw queues an update as given (a zero ID gets the next one) and returns its id.
// SendMessageJSON queues an update carrying message, written as JSON by hand: for what the
// SDK's types cannot write (fields of the Bot API they lack). It returns the update's id.
func (s *Server) SendMessageJSON(message string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextUpdate++
	id := s.nextUpdate
	raw := []byte(fmt.Sprintf(`{"update_id":%d,"message":%s}`, id, message))
	s.sent[id] = raw
	s.enqueue(id, raw)
	return id
}

func (s *Server) SendRaw(u models.Update) int64 {
	s.mu.Lock()
	if u.ID == 0 {
		s.nextUpdate++
		u.ID = s.nextUpdate
	}
	s.nextUpdate = max(s.nextUpdate, u.ID)
	raw, _ := json.Marshal(u)
	s.sent[u.ID] = raw
	s.enqueue(u.ID, raw)
	s.mu.Unlock()
	return u.ID
}

// Redeliver queues an update sent before again, with the same update_id, as Telegram does
// when a webhook did not answer 2xx. (A polling bot never sees an update again once it has
// confirmed it with a higher offset; model a repeat there with Send and the same MessageID.)
func (s *Server) Redeliver(updateID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if raw, ok := s.sent[updateID]; ok {
		s.enqueue(updateID, raw)
	}
}

// HoldConfirm, when on, keeps updates that getUpdates' offset confirmed, as if the bot
// died before its confirming request reached Telegram. A bot that restarts without its
// saved offset then gets them again.
func (s *Server) HoldConfirm(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdConfirm = on
}

// AddFile stores a file for getFile and download and returns its file_id.
func (s *Server) AddFile(data []byte, size int64, dir, ext string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextFile++
	id := "file" + strconv.Itoa(s.nextFile)
	path := fmt.Sprintf("%s/file_%d%s", dir, s.nextFile, ext)
	s.files[id] = fileEntry{data: data, size: size, path: path}
	s.paths[path] = id
	return id
}

// enqueue adds an update and wakes pollers; s.mu is held. The chats it came from become
// known: the bot may answer there.
func (s *Server) enqueue(id int64, raw json.RawMessage) {
	for _, chat := range chatsIn(raw) {
		s.known[chat] = true
	}
	s.pending = append(s.pending, raw)
	s.pendingIDs = append(s.pendingIDs, id)
	s.wake()
}

// chatsIn lists the ids of the chats an update names (every "chat" object in it, wherever
// the update kind puts it: message, edited_message, callback_query.message, my_chat_member).
func chatsIn(raw json.RawMessage) []int64 {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	var out []int64
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if c, ok := x.(map[string]any); ok && k == "chat" {
					if n, ok := c["id"].(json.Number); ok {
						if id, err := n.Int64(); err == nil {
							out = append(out, id)
						}
					}
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return out
}

func (s *Server) wake() {
	close(s.notify)
	s.notify = make(chan struct{})
}

func (s *Server) setHook(url, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hookURL, s.hookSecret = url, secret
	s.wake()
}

func (s *Server) getUpdates(ctx context.Context, p map[string]string) (int, any) {
	offset, _ := strconv.ParseInt(p["offset"], 10, 64)
	limit, _ := strconv.Atoi(p["limit"])
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	timeout, _ := strconv.Atoi(p["timeout"])
	s.mu.Lock()
	if s.hookURL != "" {
		s.mu.Unlock()
		return 409, apiErr(409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first", 0)
	}
	// Like Telegram, a new getUpdates ends the one in flight with 409.
	if s.pollStop != nil {
		s.pollStop()
	}
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	s.pollGen++
	gen := s.pollGen
	s.pollStop = stop
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.pollGen == gen {
			s.pollStop = nil
		}
		s.mu.Unlock()
	}()
	deadline := time.NewTimer(time.Duration(timeout) * time.Second)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		var batch []json.RawMessage
		keep, keepIDs := s.pending[:0:0], s.pendingIDs[:0:0]
		for i, id := range s.pendingIDs {
			if id < offset && !s.holdConfirm {
				continue // confirmed: forgotten
			}
			keep, keepIDs = append(keep, s.pending[i]), append(keepIDs, id)
			if id >= offset && len(batch) < limit {
				batch = append(batch, s.pending[i])
			}
		}
		s.pending, s.pendingIDs = keep, keepIDs
		ch := s.notify
		s.mu.Unlock()
		if len(batch) > 0 || timeout == 0 {
			if batch == nil {
				batch = []json.RawMessage{}
			}
			return ok(batch)
		}
		select {
		case <-ch:
		case <-deadline.C:
			return ok([]json.RawMessage{})
		case <-s.fs.Context().Done():
			return ok([]json.RawMessage{})
		case <-pctx.Done():
			if ctx.Err() != nil {
				return 499, apiErr(499, "client closed request", 0)
			}
			return 409, apiErr(409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running", 0)
		}
	}
}

// pushWebhook POSTs pending updates, in order, to the registered webhook while one is set,
// retrying an update until the bot answers 2xx.
func (s *Server) pushWebhook(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		s.mu.Lock()
		url, secret := s.hookURL, s.hookSecret
		var raw json.RawMessage
		var id int64
		if url != "" && len(s.pending) > 0 {
			raw, id = s.pending[0], s.pendingIDs[0]
		}
		ch := s.notify
		s.mu.Unlock()
		if raw == nil {
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return
			}
		}
		status := s.post(ctx, url, secret, raw)
		s.mu.Lock()
		s.hookTries++
		if status/100 == 2 && len(s.pendingIDs) > 0 && s.pendingIDs[0] == id {
			s.pending, s.pendingIDs = s.pending[1:], s.pendingIDs[1:]
		}
		s.mu.Unlock()
		if status/100 == 2 {
			backoff = 0
			continue
		}
		backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
	}
}

func (s *Server) post(ctx context.Context, url, secret string, body []byte) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
