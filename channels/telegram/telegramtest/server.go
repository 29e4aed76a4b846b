// Package telegramtest is a fake Telegram Bot API server for tests. It listens on
// 127.0.0.1, speaks the Bot API's JSON, multipart and form bodies at /bot<token>/<method>,
// serves downloads at /file/bot<token>/<path>, and checks what real Telegram checks where a
// user would notice: the token (401), the 4096-unit limit after entity parsing ("message is
// too long"), HTML entity parsing ("can't parse entities"), unchanged edits ("message is not
// modified"), and the chats the bot may reach: a chat is known once an update came from it
// (a user wrote there) or a test added it (AddChat); a send, edit, delete, chat action or
// media to any other is refused with 400 "Bad Request: chat not found", as Telegram
// refuses a chat the bot is not in or no user started. Tests inject user updates, make sends fail (429 with retry_after, 5xx) or slow,
// and read what the bot posted and every call it made. In webhook mode (after setWebhook)
// the fake POSTs updates to the registered URL with the secret header and redelivers on any
// non-2xx answer, as Telegram does.
package telegramtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-telegram/bot/models"

	"gateway/internal/fakeserver"
)

// Defaults of a new Server.
const (
	Token       = "7000001:AAFakeSecretTokenForTests-xyz"
	BotID       = 7000001
	BotUsername = "gateway_test_bot"
	// MaxText is Telegram's limit for one message, in UTF-16 units after entity parsing.
	MaxText = 4096
	// MaxDownload is what getFile serves at most, like Telegram's 20 MB.
	MaxDownload = 20 << 20
)

// Call is one request the bot made.
type Call struct {
	Method string
	Time   time.Time
	Params map[string]string
	Files  map[string][]byte
	Status int // HTTP status answered
}

// Message is a message the bot has in a chat, as it stands now.
type Message struct {
	ID        int
	ChatID    int64
	ThreadID  int
	Kind      string // "text", "voice", "audio", "document", "photo"
	Text      string // visible text after entity parsing (caption for media)
	Raw       string // text exactly as sent (HTML when ParseMode is HTML)
	ParseMode string
	Edits     int
	ReplyTo   int // message_id of reply_parameters, 0 when none
	File      []byte
	FileName  string
	Opus      bool // the voice payload is Ogg with an Opus stream
	Time      time.Time
	Updated   time.Time
}

// Server is the fake. Its methods are safe for concurrent use.
type Server struct {
	URL   string // pass as api_url
	Token string

	fs     *fakeserver.Server
	client *http.Client
	calls  fakeserver.Log[Call]
	fails  fakeserver.Failures

	mu         sync.Mutex
	notify     chan struct{} // closed and replaced when updates arrive or the webhook changes
	pending    []json.RawMessage
	pendingIDs []int64
	sent       map[int64]json.RawMessage // every update ever queued, for Redeliver
	nextUpdate int64
	nextMsg    int
	nextFile   int
	msgs       map[int64][]*Message
	typing     map[int64]int
	files      map[string]fileEntry // by file_id
	paths      map[string]string    // file_path -> file_id
	slow       map[string]time.Duration
	commands   []models.BotCommand
	// chatCommands are menus set for one chat (scope type chat), by chat id.
	chatCommands map[string][]models.BotCommand
	hookURL      string
	hookSecret   string
	hookTries    int
	pollStop     context.CancelFunc // the getUpdates in flight
	pollGen      int
	holdConfirm  bool
	parseFails   int
	// migrated are groups upgraded to supergroups: old id -> new id (see Migrate).
	migrated map[int64]int64
	// known are the chats the bot may reach: those an update came from, and those added.
	known map[int64]bool
}

type fileEntry struct {
	data []byte
	size int64 // claimed size; may exceed len(data) to test limits without big payloads
	path string
	// downloadStatus, when set, is what the download answers (404: gone from the file server).
	downloadStatus int
	// gone: getFile refuses the file_id, as Telegram does for an expired or unavailable file.
	gone bool
}

// NewServer starts a fake on 127.0.0.1, closed when the test ends.
func NewServer(t testing.TB) *Server {
	s := Start(Options{})
	t.Cleanup(s.Close)
	return s
}

// Close stops the fake and its webhook pusher.
func (s *Server) Close() { s.fs.Close() }

// --- failure injection ---

// isSend reports whether method puts or changes a message in a chat.
func isSend(method string) bool {
	switch method {
	case "sendMessage", "editMessageText", "sendVoice", "sendAudio", "sendDocument", "sendPhoto":
		return true
	}
	return false
}

// FailNext makes the next n calls f applies to fail as Telegram fails them: HTTP status
// and error_code f.Code(), ok:false, and parameters.retry_after (f.RetryAfter rounded up
// to whole seconds) when f.RetryAfter > 0. f.Method "" applies to the message-sending
// calls (sendMessage, editMessageText and the media sends); any other Bot API method,
// sendChatAction included, can be named. f.Chat (a chat_id, e.g. "1001") limits the
// failure to one chat, as Telegram's per-chat flood limits do.
func (s *Server) FailNext(n int, f fakeserver.Failure) { s.fails.Add(n, f) }

// ClearFailures drops the failures FailNext scripted and no call has taken yet.
func (s *Server) ClearFailures() { s.fails.Clear() }

// failure renders a scripted failure as the Bot API answers it.
func failure(f fakeserver.Failure) (int, any) {
	desc := f.Message
	switch {
	case desc != "":
	case f.Code() == http.StatusTooManyRequests:
		desc = "Too Many Requests: retry after " + strconv.Itoa(max(1, f.Seconds()))
	default:
		desc = http.StatusText(f.Code())
	}
	secs := 0
	if f.RetryAfter > 0 {
		secs = max(1, f.Seconds())
	}
	return f.Code(), apiErr(f.Code(), desc, secs)
}

// RejectHTML makes the next n messages sent with parse_mode HTML fail as Telegram does
// for HTML it cannot parse, whatever they hold (Telegram refuses some valid-looking HTML,
// e.g. entities nested beyond its limits).
func (s *Server) RejectHTML(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parseFails += n
}

// Slow delays every answer to method by d (the request's context still ends it); method
// "file" delays file downloads.
func (s *Server) Slow(method string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slow[method] = d
}

// --- reading what happened ---

// Calls lists the calls made to method ("" for all), oldest first.
func (s *Server) Calls(method string) []Call {
	return s.calls.Filter(func(c Call) bool { return method == "" || c.Method == method })
}

// Messages lists what the bot has in chat, oldest first (copies).
func (s *Server) Messages(chatID int64) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, 0, len(s.msgs[chatID]))
	for _, m := range s.msgs[chatID] {
		out = append(out, *m)
	}
	return out
}

// Typing is how many typing actions the bot sent to chat.
func (s *Server) Typing(chatID int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.typing[chatID]
}

// ChatCommands is the command list the bot registered for one chat (scope chat).
func (s *Server) ChatCommands(chatID string) []models.BotCommand {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]models.BotCommand(nil), s.chatCommands[chatID]...)
}

// Commands is the command list the bot registered with setMyCommands.
func (s *Server) Commands() []models.BotCommand {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commands)
}

// Webhook is the registered webhook URL and secret ("" when polling).
func (s *Server) Webhook() (url, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hookURL, s.hookSecret
}

// WebhookTries is how many webhook POSTs the fake has made.
func (s *Server) WebhookTries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hookTries
}

// Pending is how many updates are waiting to be fetched or pushed.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Delete removes message id from chat, as a user deleting the bot's message does; it
// reports whether there was one.
func (s *Server) Delete(chatID int64, id int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range s.msgs[chatID] {
		if m.ID == id {
			s.msgs[chatID] = slices.Delete(s.msgs[chatID], i, i+1)
			return true
		}
	}
	return false
}

// BotMessage returns a message the bot posted, as Telegram shows it in reply_to_message.
func (s *Server) BotMessage(chatID int64, id int) *models.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.msgs[chatID] {
		if m.ID == id {
			return &models.Message{ID: m.ID, Date: int(m.Time.Unix()), Chat: chatOf(chatID, m.ThreadID), Text: m.Text,
				From: &models.User{ID: BotID, IsBot: true, FirstName: "Gateway", Username: BotUsername}}
		}
	}
	return nil
}

// --- the HTTP side ---

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/file/bot"); ok {
		s.serveFile(w, r, rest)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/bot")
	token, method, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		writeJSON(w, 404, map[string]any{"ok": false, "error_code": 404, "description": "Not Found"})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 60<<20)
	params, files, err := parseParams(r)
	call := Call{Method: method, Time: time.Now(), Params: params, Files: files}
	status, body := 0, any(nil)
	switch {
	case token != s.Token:
		status, body = 401, apiErr(401, "Unauthorized", 0)
	case err != nil:
		status, body = 400, apiErr(400, "Bad Request: "+err.Error(), 0)
	default:
		status, body = s.handle(r.Context(), method, params, files)
	}
	call.Status = status
	s.calls.Add(call)
	writeJSON(w, status, body)
}

func (s *Server) handle(ctx context.Context, method string, p map[string]string, files map[string][]byte) (int, any) {
	s.mu.Lock()
	delay := s.slow[method]
	s.mu.Unlock()
	fail, failed := s.fails.Take(method, p["chat_id"], isSend)
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return 499, apiErr(499, "client gone", 0)
		}
	}
	if failed {
		return failure(fail)
	}
	if isSend(method) || method == "sendChatAction" || method == "deleteMessage" {
		if id, err := strconv.ParseInt(p["chat_id"], 10, 64); err == nil {
			s.mu.Lock()
			to, gone := s.migrated[id]
			s.mu.Unlock()
			if gone {
				return 400, map[string]any{"ok": false, "error_code": 400,
					"description": "Bad Request: group chat was upgraded to a supergroup chat",
					"parameters":  map[string]any{"migrate_to_chat_id": to}}
			}
			if !s.Known(id) {
				return 400, apiErr(400, "Bad Request: chat not found", 0)
			}
		}
	}
	switch method {
	case "getMe":
		return ok(models.User{ID: BotID, IsBot: true, FirstName: "Gateway", Username: BotUsername})
	case "getUpdates":
		return s.getUpdates(ctx, p)
	case "deleteWebhook":
		s.setHook("", "")
		return ok(true)
	case "setWebhook":
		s.setHook(p["url"], p["secret_token"])
		return ok(true)
	case "getWebhookInfo":
		u, _ := s.Webhook()
		return ok(models.WebhookInfo{URL: u, PendingUpdateCount: s.Pending()})
	case "setMyCommands":
		var cmds []models.BotCommand
		if err := json.Unmarshal([]byte(p["commands"]), &cmds); err != nil {
			return 400, apiErr(400, "Bad Request: can't parse commands JSON", 0)
		}
		var scope struct {
			Type   string          `json:"type"`
			ChatID json.RawMessage `json:"chat_id"`
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if p["scope"] != "" && json.Unmarshal([]byte(p["scope"]), &scope) == nil && scope.Type == "chat" {
			var id string
			if json.Unmarshal(scope.ChatID, &id) != nil {
				id = string(scope.ChatID)
			}
			if s.chatCommands == nil {
				s.chatCommands = map[string][]models.BotCommand{}
			}
			s.chatCommands[id] = cmds
			return ok(true)
		}
		s.commands = cmds
		return ok(true)
	case "sendChatAction":
		chat, err := chatID(p)
		if err != nil {
			return 400, apiErr(400, err.Error(), 0)
		}
		if p["action"] == "typing" {
			s.mu.Lock()
			s.typing[chat]++
			s.mu.Unlock()
		}
		return ok(true)
	case "sendMessage":
		return s.sendMessage(p)
	case "editMessageText":
		return s.editMessage(p)
	case "sendVoice", "sendAudio", "sendDocument", "sendPhoto":
		return s.sendMedia(method, p, files)
	case "getFile":
		return s.getFile(p["file_id"])
	case "deleteMessage":
		return s.deleteMessage(p)
	}
	return 404, apiErr(404, "Not Found: method not found", 0)
}

// Migrate upgrades the group old to a supergroup with the id to, as Telegram does when a
// group grows or an admin changes some settings: from now on every call that sends to,
// edits in or acts in old is refused with 400 and parameters.migrate_to_chat_id, and the
// bot may post in to. The service messages Telegram sends about it are MigrateTo and
// MigrateFrom.
func (s *Server) Migrate(old, to int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.migrated == nil {
		s.migrated = map[int64]int64{}
	}
	s.migrated[old] = to
	s.known[to] = true
}

// AddChat makes chat one the bot may post in before anyone wrote there: a private chat
// whose user started the bot, or a group the bot was added to. Chats an update came from
// are known already; a call to any other is refused with 400 "Bad Request: chat not found".
func (s *Server) AddChat(chat int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.known[chat] = true
}

// Known reports whether the bot may post in chat (an update came from it, or it was added).
func (s *Server) Known(chat int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.known[chat]
}

// MigrateTo queues the service message Telegram sends in the old group when it became the
// supergroup to (migrate_to_chat_id), and returns its update id.
func (s *Server) MigrateTo(old, to int64) int64 {
	id, _ := s.Send(Update{ChatID: old, Edit: func(m *models.Message) {
		m.Chat.Type = models.ChatTypeGroup
		m.MigrateToChatID = to
	}})
	return id
}

// MigrateFrom queues the service message Telegram sends in the new supergroup to about
// the group old it was (migrate_from_chat_id), and returns its update id.
func (s *Server) MigrateFrom(old, to int64) int64 {
	id, _ := s.Send(Update{ChatID: to, Edit: func(m *models.Message) { m.MigrateFromChatID = old }})
	return id
}

func ok(v any) (int, any) { return 200, map[string]any{"ok": true, "result": v} }

func apiErr(code int, desc string, retryAfter int) map[string]any {
	m := map[string]any{"ok": false, "error_code": code, "description": desc}
	if retryAfter > 0 {
		m["parameters"] = map[string]any{"retry_after": retryAfter}
	}
	return m
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// parseParams reads a Bot API request's parameters from the query and from a JSON,
// multipart or urlencoded body. JSON values that are not strings are kept as JSON text,
// the way multipart clients send them.
func parseParams(r *http.Request) (map[string]string, map[string][]byte, error) {
	p := map[string]string{}
	files := map[string][]byte{}
	for k, v := range r.URL.Query() {
		p[k] = v[0]
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		var m map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil && err != io.EOF {
			return nil, nil, fmt.Errorf("invalid JSON body: %v", err)
		}
		for k, v := range m {
			var str string
			if json.Unmarshal(v, &str) == nil {
				p[k] = str
			} else {
				p[k] = string(v)
			}
		}
	case "multipart/form-data":
		if err := r.ParseMultipartForm(8 << 20); err != nil {
			if errors.Is(err, io.EOF) {
				return p, files, nil // a method without parameters: the SDK sends an empty body
			}
			return nil, nil, fmt.Errorf("invalid multipart body: %v", err)
		}
		for k, v := range r.MultipartForm.Value {
			p[k] = v[0]
		}
		for k, fhs := range r.MultipartForm.File {
			f, err := fhs[0].Open()
			if err != nil {
				return nil, nil, err
			}
			b, err := io.ReadAll(f)
			f.Close()
			if err != nil {
				return nil, nil, err
			}
			files[k] = b
			p[k+".filename"] = fhs[0].Filename
		}
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return nil, nil, fmt.Errorf("invalid form body: %v", err)
		}
		for k, v := range r.PostForm {
			p[k] = v[0]
		}
	}
	return p, files, nil
}

func chatID(p map[string]string) (int64, error) {
	id, err := strconv.ParseInt(p["chat_id"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("Bad Request: chat not found")
	}
	return id, nil
}

// visible parses text as Telegram would for parse_mode and returns what the user sees.
func visible(text, parseMode string) (string, error) {
	switch strings.ToUpper(parseMode) {
	case "":
		return text, nil
	case "HTML":
		return ParseHTML(text)
	}
	return "", fmt.Errorf("unsupported parse_mode %q", parseMode)
}

func (s *Server) checkText(text, parseMode string) (string, int, any) {
	s.mu.Lock()
	reject := strings.EqualFold(parseMode, "HTML") && s.parseFails > 0
	if reject {
		s.parseFails--
	}
	s.mu.Unlock()
	if reject {
		return "", 400, apiErr(400, "Bad Request: can't parse entities: Can't find end tag corresponding to start tag \"b\"", 0)
	}
	vis, err := visible(text, parseMode)
	if err != nil {
		return "", 400, apiErr(400, "Bad Request: can't parse entities: "+err.Error(), 0)
	}
	if strings.TrimSpace(vis) == "" {
		return "", 400, apiErr(400, "Bad Request: message text is empty", 0)
	}
	if UTF16Len(vis) > MaxText {
		return "", 400, apiErr(400, "Bad Request: message is too long", 0)
	}
	return vis, 0, nil
}

func replyTo(p map[string]string) int {
	var rp models.ReplyParameters
	if p["reply_parameters"] != "" && json.Unmarshal([]byte(p["reply_parameters"]), &rp) == nil {
		return rp.MessageID
	}
	return 0
}

func (s *Server) sendMessage(p map[string]string) (int, any) {
	chat, err := chatID(p)
	if err != nil {
		return 400, apiErr(400, err.Error(), 0)
	}
	vis, status, body := s.checkText(p["text"], p["parse_mode"])
	if status != 0 {
		return status, body
	}
	thread, _ := strconv.Atoi(p["message_thread_id"])
	now := time.Now()
	s.mu.Lock()
	s.nextMsg++
	m := &Message{ID: s.nextMsg, ChatID: chat, ThreadID: thread, Kind: "text", Text: vis, Raw: p["text"],
		ParseMode: p["parse_mode"], ReplyTo: replyTo(p), Time: now, Updated: now}
	s.msgs[chat] = append(s.msgs[chat], m)
	s.mu.Unlock()
	return ok(s.apiMessage(m))
}

func (s *Server) editMessage(p map[string]string) (int, any) {
	chat, err := chatID(p)
	if err != nil {
		return 400, apiErr(400, err.Error(), 0)
	}
	id, _ := strconv.Atoi(p["message_id"])
	vis, status, body := s.checkText(p["text"], p["parse_mode"])
	if status != 0 {
		return status, body
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.msgs[chat] {
		if m.ID != id || m.Kind != "text" {
			continue
		}
		if m.Raw == p["text"] && m.ParseMode == p["parse_mode"] {
			return 400, apiErr(400, "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message", 0)
		}
		m.Text, m.Raw, m.ParseMode = vis, p["text"], p["parse_mode"]
		m.Edits++
		m.Updated = time.Now()
		return ok(s.apiMessage(m))
	}
	return 400, apiErr(400, "Bad Request: message to edit not found", 0)
}

func (s *Server) deleteMessage(p map[string]string) (int, any) {
	chat, err := chatID(p)
	if err != nil {
		return 400, apiErr(400, err.Error(), 0)
	}
	id, _ := strconv.Atoi(p["message_id"])
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range s.msgs[chat] {
		if m.ID == id {
			s.msgs[chat] = append(s.msgs[chat][:i], s.msgs[chat][i+1:]...)
			return ok(true)
		}
	}
	return 400, apiErr(400, "Bad Request: message to delete not found", 0)
}

func (s *Server) sendMedia(method string, p map[string]string, files map[string][]byte) (int, any) {
	chat, err := chatID(p)
	if err != nil {
		return 400, apiErr(400, err.Error(), 0)
	}
	field := strings.TrimPrefix(strings.ToLower(method), "send")
	data, has := files[field]
	if !has {
		return 400, apiErr(400, "Bad Request: there is no "+field+" in the request", 0)
	}
	if len(data) == 0 {
		return 400, apiErr(400, "Bad Request: file must be non-empty", 0)
	}
	m := &Message{Kind: field, File: data, FileName: p[field+".filename"], Raw: p["caption"], ParseMode: p["parse_mode"], ReplyTo: replyTo(p)}
	if field == "voice" {
		// Telegram shows a voice note only for Ogg/Opus (or MP3/M4A); the gateway sends Ogg.
		if !bytes.HasPrefix(data, []byte("OggS")) {
			return 400, apiErr(400, "Bad Request: wrong file type: a voice note must be OGG/Opus", 0)
		}
		head := data[:min(len(data), 200)]
		m.Opus = bytes.Contains(head, []byte("OpusHead"))
	}
	if m.Raw != "" {
		vis, err := visible(m.Raw, m.ParseMode)
		if err != nil {
			return 400, apiErr(400, "Bad Request: can't parse entities: "+err.Error(), 0)
		}
		if UTF16Len(vis) > 1024 {
			return 400, apiErr(400, "Bad Request: message caption is too long", 0)
		}
		m.Text = vis
	}
	m.ThreadID, _ = strconv.Atoi(p["message_thread_id"])
	m.ChatID = chat
	m.Time = time.Now()
	m.Updated = m.Time
	s.mu.Lock()
	s.nextMsg++
	m.ID = s.nextMsg
	s.msgs[chat] = append(s.msgs[chat], m)
	s.mu.Unlock()
	return ok(s.apiMessage(m))
}

func (s *Server) apiMessage(m *Message) models.Message {
	out := models.Message{ID: m.ID, Date: int(m.Time.Unix()), Chat: chatOf(m.ChatID, m.ThreadID), MessageThreadID: m.ThreadID,
		From: &models.User{ID: BotID, IsBot: true, FirstName: "Gateway", Username: BotUsername}}
	switch m.Kind {
	case "text":
		out.Text = m.Text
	case "voice":
		out.Voice = &models.Voice{FileID: fmt.Sprintf("sent-%d", m.ID), MimeType: "audio/ogg", FileSize: int64(len(m.File))}
	case "audio":
		out.Audio = &models.Audio{FileID: fmt.Sprintf("sent-%d", m.ID), FileSize: int64(len(m.File))}
	default:
		out.Document = &models.Document{FileID: fmt.Sprintf("sent-%d", m.ID), FileName: m.FileName, FileSize: int64(len(m.File))}
	}
	if m.Kind != "text" {
		out.Caption = m.Text
	}
	return out
}

func chatOf(id int64, thread int) models.Chat {
	switch {
	case id > 0:
		return models.Chat{ID: id, Type: models.ChatTypePrivate, FirstName: "User"}
	case thread != 0:
		return models.Chat{ID: id, Type: models.ChatTypeSupergroup, Title: "Forum", IsForum: true}
	default:
		return models.Chat{ID: id, Type: models.ChatTypeSupergroup, Title: "Group"}
	}
}

func (s *Server) getFile(id string) (int, any) {
	s.mu.Lock()
	f, found := s.files[id]
	s.mu.Unlock()
	if !found {
		return 400, apiErr(400, "Bad Request: invalid file_id", 0)
	}
	if f.gone {
		return 400, apiErr(400, "Bad Request: wrong file_id or the file is temporarily unavailable", 0)
	}
	if f.size > MaxDownload {
		return 400, apiErr(400, "Bad Request: file is too big", 0)
	}
	return ok(models.File{FileID: id, FileUniqueID: "u" + id, FileSize: f.size, FilePath: f.path})
}

func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, rest string) {
	token, path, _ := strings.Cut(rest, "/")
	s.calls.Add(Call{Method: "file", Time: time.Now(), Params: map[string]string{"path": path}})
	s.mu.Lock()
	id, found := s.paths[path]
	f := s.files[id]
	delay := s.slow["file"]
	s.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	switch {
	case token != s.Token:
		writeJSON(w, 401, apiErr(401, "Unauthorized", 0))
	case !found:
		writeJSON(w, 404, apiErr(404, "Not Found", 0))
	case f.downloadStatus != 0:
		writeJSON(w, f.downloadStatus, apiErr(f.downloadStatus, http.StatusText(f.downloadStatus), 0))
	default:
		w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
		_, _ = w.Write(f.data)
	}
}
