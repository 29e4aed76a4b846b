// Package slacktest is a fake Slack for tests: the Web API methods the gateway's Slack
// adapter calls, file download and the external upload flow, and Socket Mode over a real
// WebSocket (or Events API delivery over signed HTTP), all on 127.0.0.1. It is driven by
// the real slack-go client; tests inject user messages and read what the bot posted.
//
// It knows the channels a user wrote or ran a command in, and those a test added
// (AddChannel); a call about any other channel is answered channel_not_found, as Slack
// answers for one the bot is not in or that was deleted. A user id is a channel too (the
// app's DM with them) once the user wrote or SetUser named them.
package slacktest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"gateway/internal/fakeserver"
)

// The fake's fixed identities. Tests configure the adapter with these tokens; any other
// token is answered with invalid_auth.
const (
	BotToken      = "xoxb-1111-2222-fakeBotTokenSecret"
	AppToken      = "xapp-1-A0001-3333-fakeAppTokenSecret"
	SigningSecret = "fake0signing0secret0value0123456"
	BotUserID     = "UBOT0001"
	BotID         = "BBOT0001"
	TeamID        = "TFAKE0001"
	AppID         = "AFAKE0001"
	// MaxTextLen is the message text limit the fake enforces (msg_too_long), in runes.
	MaxTextLen = 4000
)

// Call is one Web API request the fake received.
type Call struct {
	Method string     // "chat.postMessage", "files.upload" (the upload URL), "files.download", ...
	Params url.Values // form or query parameters, the token removed
	Status int        // HTTP status answered
	Error  string     // Slack error code answered, "" when ok
	Time   time.Time
}

// Posted is a message the bot has in a channel, as a user would see it now.
type Posted struct {
	Channel  string
	TS       string
	ThreadTS string
	Text     string // after every edit
	Edits    int
	Files    []File
	Time     time.Time // when it was first posted
}

// File is a file the bot shared or a user sent.
type File struct {
	ID    string
	Name  string
	Title string
	MIME  string
	Data  []byte
}

// Server is the fake Slack. All methods are safe for concurrent use.
type Server struct {
	// URL is the base URL (http://127.0.0.1:port), without a trailing slash.
	URL string

	fs    *fakeserver.Server
	ctx   context.Context // ends at Close
	kick  chan struct{}
	calls fakeserver.Log[Call]
	fails fakeserver.Failures

	mu         sync.Mutex
	seq        int64
	known      map[string]bool       // channel (and user) ids the bot can post to
	messages   map[string][]*message // channel -> messages, oldest first
	byKey      map[string]*message   // channel:ts -> message
	reactions  map[string]map[string]bool
	typing     map[string]int
	status     map[string]string // channel:thread -> assistant status
	uploads    map[string]*upload
	userFiles  map[string]*File
	sent       map[string]*injected // channel:ts -> the events a user message produced
	noStatus   bool                 // assistant.threads.setStatus is refused
	users      map[string]userInfo  // users.info answers, by user id
	userDelay  time.Duration        // users.info answers after this long
	held       chan struct{}        // while set, file downloads wait until it is closed
	slow       map[string]time.Duration
	socket     socketState
	httpEvents httpState
	commands   commandState
}

type message struct {
	Posted
	user    string
	bot     bool
	deleted bool
}

type userInfo struct {
	display, real string
}

type upload struct {
	File
	length  int
	done    bool
	deleted bool
}

// sending reports whether a Failure with Method "" affects method: the calls that put something in a chat.
func sending(method string) bool {
	switch method {
	case "chat.postMessage", "chat.postEphemeral", "chat.update", "chat.delete", "files.getUploadURLExternal", "files.completeUploadExternal", "files.delete":
		return true
	}
	return false
}

// New starts a fake on 127.0.0.1 and closes it when the test ends.
func New(t testing.TB) *Server {
	s := &Server{
		kick:     make(chan struct{}, 1),
		known:    map[string]bool{},
		messages: map[string][]*message{}, byKey: map[string]*message{},
		reactions: map[string]map[string]bool{}, typing: map[string]int{}, status: map[string]string{},
		uploads: map[string]*upload{}, userFiles: map[string]*File{}, sent: map[string]*injected{},
		users: map[string]userInfo{}, slow: map[string]time.Duration{},
	}
	s.socket.setup()
	s.httpEvents.setup()
	mux := http.NewServeMux()
	mux.HandleFunc("/api/{method}", s.serveAPI)
	mux.HandleFunc("GET /files/{id}/{name}", s.serveDownload)
	mux.HandleFunc("GET /signin", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html>sign in to Slack</html>")
	})
	mux.HandleFunc("POST /upload/{id}", s.serveUpload)
	mux.HandleFunc("GET /link", s.serveSocket)
	mux.HandleFunc("POST /commands/response/{channel}/{user}", s.serveResponseURL)
	s.fs = fakeserver.New(mux)
	s.URL, s.ctx = s.fs.URL, s.fs.Context()
	s.fs.OnClose(s.closeSockets)
	s.fs.Go(s.dispatch)
	t.Cleanup(s.Close)
	return s
}

// APIURL is the value for channels.slack.api_url.
func (s *Server) APIURL() string { return s.URL + "/api/" }

// Close stops the fake and waits for its goroutines.
func (s *Server) Close() { s.fs.Close() }

// FailNext makes the next n calls f applies to fail as Slack fails them: f.Code() 429 with
// a Retry-After header (f.RetryAfter rounded up to whole seconds); Status 200 with Slack's
// {"ok":false,"error":f.Message} (default "internal_error"); any other status with an HTML
// error page. f.Method "" applies to the sending calls (chat.postMessage,
// chat.postEphemeral, chat.update, chat.delete, the upload flow and files.delete); any Web API method
// can be named, and "files.download" for user file downloads.
func (s *Server) FailNext(n int, f fakeserver.Failure) { s.fails.Add(n, f) }

// ClearFailures drops the failures FailNext scripted that have not happened yet.
func (s *Server) ClearFailures() { s.fails.Clear() }

// RefuseAssistantStatus makes assistant.threads.setStatus fail, as it does outside an
// app's assistant threads, so the adapter must fall back to a reaction.
func (s *Server) RefuseAssistantStatus(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noStatus = refuse
}

// SetUser makes users.info know user id, with a profile display name and a real name
// (either may be ""). Its user name is the id in lower case. users.info answers
// user_not_found for ids never set.
func (s *Server) SetUser(id, display, real string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[id] = userInfo{display: display, real: real}
}

// AddChannel makes channel a conversation the bot is in, so it may post there before
// anyone wrote in it: a channel it was invited to, or a DM the user opened.
func (s *Server) AddChannel(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.known[channel] = true
}

// DeleteChannel deletes channel and its messages, as an admin deleting it does: every
// later call about it is answered channel_not_found.
func (s *Server) DeleteChannel(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.known, channel)
	for _, m := range s.messages[channel] {
		delete(s.byKey, channel+":"+m.TS)
	}
	delete(s.messages, channel)
}

// knownLocked reports whether the bot can post to channel: one a user wrote in or a test
// added, or a user id (the app's DM with them) of a user the fake knows. Call with mu held.
func (s *Server) knownLocked(channel string) bool {
	if s.known[channel] {
		return true
	}
	_, user := s.users[channel]
	return user
}

// SetUserInfoDelay makes users.info answer only after d (or when the client gives up), as
// a slow Slack would.
func (s *Server) SetUserInfoDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.userDelay = d
}

// Slow makes the fake answer method ("files.upload" for the bytes of an upload, or any Web
// API method) only after d, before it takes effect (the request's end still cuts it short),
// as a slow Slack would; 0 makes it answer at once again.
func (s *Server) Slow(method string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slow[method] = d
}

// delay waits out what Slow set for method, and reports false when the request or the
// fake ended meanwhile.
func (s *Server) delay(r *http.Request, method string) bool {
	s.mu.Lock()
	d := s.slow[method]
	s.mu.Unlock()
	return s.fs.Wait(r, d)
}

// HoldDownloads makes user file downloads wait, after they are logged as calls, until
// release is called (or the client gives up), as a slow file server would. release is also
// called when the test ends.
func (s *Server) HoldDownloads(t testing.TB) (release func()) {
	held := make(chan struct{})
	s.mu.Lock()
	s.held = held
	s.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			s.mu.Lock()
			if s.held == held {
				s.held = nil
			}
			s.mu.Unlock()
			close(held)
		})
	}
	t.Cleanup(release)
	return release
}

// Calls lists the Web API calls received for method ("" for all), oldest first.
func (s *Server) Calls(method string) []Call {
	return s.calls.Filter(func(c Call) bool { return method == "" || c.Method == method })
}

// Posted lists the bot's messages in channel that are still there, oldest first.
func (s *Server) Posted(channel string) []Posted {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Posted
	for _, m := range s.messages[channel] {
		if m.bot && !m.deleted {
			p := m.Posted
			p.Files = append([]File(nil), m.Files...)
			out = append(out, p)
		}
	}
	return out
}

// Typing counts the typing signals the bot sent to channel: reactions added and
// non-empty assistant statuses set.
func (s *Server) Typing(channel string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.typing[channel]
}

// Reactions lists the reactions the bot currently has on a message.
func (s *Server) Reactions(channel, ts string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name, on := range s.reactions[channel+":"+ts] {
		if on {
			out = append(out, name)
		}
	}
	return out
}

// Status is the assistant status currently shown in a thread.
func (s *Server) Status(channel, threadTS string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status[channel+":"+threadTS]
}

// nextTS returns a fresh message timestamp; call with mu held.
func (s *Server) nextTS() string {
	s.seq++
	return fmt.Sprintf("%d.%06d", 1_700_000_000+s.seq/1_000_000, s.seq%1_000_000)
}

func (s *Server) nextID(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s%08d", prefix, s.seq)
}

// apiResult is what one API method answers.
type apiResult struct {
	status     int
	retryAfter time.Duration
	body       map[string]any
}

func okBody(kv ...any) apiResult {
	b := map[string]any{"ok": true}
	for i := 0; i+1 < len(kv); i += 2 {
		b[kv[i].(string)] = kv[i+1]
	}
	return apiResult{status: http.StatusOK, body: b}
}

func errBody(code string) apiResult {
	return apiResult{status: http.StatusOK, body: map[string]any{"ok": false, "error": code}}
}

// token reads the bearer token or the form's token field.
func token(r *http.Request) string {
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return t
	}
	return r.Form.Get("token")
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	method := r.PathValue("method")
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	if !s.delay(r, method) {
		return
	}
	if method == "users.info" {
		s.mu.Lock()
		d := s.userDelay
		s.mu.Unlock()
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.Context().Done():
			case <-s.ctx.Done():
			}
			t.Stop()
		}
	}
	tok := token(r)
	params := url.Values{}
	for k, v := range r.Form {
		if k != "token" {
			params[k] = v
		}
	}
	res := s.api(method, tok, params)
	code, _ := res.body["error"].(string)
	s.calls.Add(Call{Method: method, Params: params, Status: res.status, Error: code, Time: time.Now()})
	writeResult(w, res)
}

func writeResult(w http.ResponseWriter, res apiResult) {
	switch {
	case res.status == http.StatusTooManyRequests:
		w.Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(res.retryAfter.Seconds()))))
		http.Error(w, "rate limited", res.status)
	case res.status != http.StatusOK:
		http.Error(w, "<html>server error</html>", res.status)
	default:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(res.body)
	}
}

// injectedFailure consumes a scripted failure for method, if any.
func (s *Server) injectedFailure(method string) (apiResult, bool) {
	f, ok := s.fails.Take(method, "", sending)
	if !ok {
		return apiResult{}, false
	}
	if f.Status == http.StatusOK {
		code := f.Message
		if code == "" {
			code = "internal_error"
		}
		return errBody(code), true
	}
	return apiResult{status: f.Code(), retryAfter: f.RetryAfter}, true
}

func (s *Server) api(method, tok string, p url.Values) apiResult {
	want := BotToken
	if method == "apps.connections.open" {
		want = AppToken
	}
	if tok == "" {
		return errBody("not_authed")
	}
	if tok != want {
		return errBody("invalid_auth")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if res, ok := s.injectedFailure(method); ok {
		return res
	}
	switch method {
	case "auth.test":
		return okBody("url", s.URL+"/", "team", "Fake Team", "user", "gateway", "team_id", TeamID,
			"user_id", BotUserID, "bot_id", BotID)
	case "apps.connections.open":
		return okBody("url", "ws"+strings.TrimPrefix(s.URL, "http")+"/link?ticket="+s.nextID("tk"))
	case "chat.postMessage":
		return s.postMessage(p)
	case "chat.postEphemeral":
		return s.postEphemeral(p)
	case "chat.update":
		return s.updateMessage(p)
	case "chat.delete":
		if !s.knownLocked(p.Get("channel")) {
			return errBody("channel_not_found")
		}
		m := s.byKey[p.Get("channel")+":"+p.Get("ts")]
		if m == nil || m.deleted {
			return errBody("message_not_found")
		}
		if !m.bot {
			return errBody("cant_delete_message")
		}
		m.deleted = true
		return okBody("channel", m.Channel, "ts", m.TS)
	case "reactions.add", "reactions.remove":
		return s.react(method, p)
	case "assistant.threads.setStatus":
		if s.noStatus {
			return errBody("not_allowed_token_type")
		}
		ch, thread := p.Get("channel_id"), p.Get("thread_ts")
		if ch == "" || thread == "" {
			return errBody("invalid_arguments")
		}
		if !s.knownLocked(ch) {
			return errBody("channel_not_found")
		}
		s.status[ch+":"+thread] = p.Get("status")
		if p.Get("status") != "" {
			s.typing[ch]++
		}
		return okBody()
	case "files.getUploadURLExternal":
		n, err := parseInt(p.Get("length"))
		if err != nil || n <= 0 || p.Get("filename") == "" {
			return errBody("invalid_arguments")
		}
		id := s.nextID("F")
		s.uploads[id] = &upload{File: File{ID: id, Name: p.Get("filename")}, length: n}
		return okBody("upload_url", s.URL+"/upload/"+id, "file_id", id)
	case "files.completeUploadExternal":
		return s.completeUpload(p)
	case "files.delete":
		return s.deleteFile(p.Get("file"))
	case "users.info":
		return s.userInfo(p.Get("user"))
	}
	return errBody("unknown_method")
}

// userInfo answers users.info as Slack does, with the fields the adapter reads; call with
// mu held.
func (s *Server) userInfo(id string) apiResult {
	u, ok := s.users[id]
	if !ok {
		return errBody("user_not_found")
	}
	name := strings.ToLower(id)
	return okBody("user", map[string]any{
		"id": id, "team_id": TeamID, "name": name, "real_name": u.real,
		"profile": map[string]any{"display_name": u.display, "real_name": u.real},
	})
}

func parseInt(s string) (int, error) {
	var n int
	_, err := fmt.Sscan(s, &n)
	return n, err
}

func (s *Server) postMessage(p url.Values) apiResult {
	ch, text := p.Get("channel"), p.Get("text")
	if !s.knownLocked(ch) {
		return errBody("channel_not_found")
	}
	if strings.TrimSpace(text) == "" && p.Get("blocks") == "" {
		return errBody("no_text")
	}
	if utf8.RuneCountInString(text) > MaxTextLen {
		return errBody("msg_too_long")
	}
	m := &message{bot: true, user: BotUserID, Posted: Posted{
		Channel: ch, TS: s.nextTS(), ThreadTS: p.Get("thread_ts"), Text: text, Time: time.Now(),
	}}
	s.addMessage(m)
	return okBody("channel", ch, "ts", m.TS, "message", map[string]any{
		"type": "message", "user": BotUserID, "bot_id": BotID, "text": text, "ts": m.TS, "thread_ts": m.ThreadTS,
	})
}

// addMessage stores m; call with mu held.
func (s *Server) addMessage(m *message) {
	s.messages[m.Channel] = append(s.messages[m.Channel], m)
	s.byKey[m.Channel+":"+m.TS] = m
}

func (s *Server) updateMessage(p url.Values) apiResult {
	if !s.knownLocked(p.Get("channel")) {
		return errBody("channel_not_found")
	}
	m := s.byKey[p.Get("channel")+":"+p.Get("ts")]
	if m == nil || m.deleted {
		return errBody("message_not_found")
	}
	if !m.bot {
		return errBody("cant_update_message")
	}
	text := p.Get("text")
	if utf8.RuneCountInString(text) > MaxTextLen {
		return errBody("msg_too_long")
	}
	if strings.TrimSpace(text) == "" {
		return errBody("no_text")
	}
	m.Text = text
	m.Edits++
	return okBody("channel", m.Channel, "ts", m.TS, "text", text)
}

func (s *Server) react(method string, p url.Values) apiResult {
	ch, ts, name := p.Get("channel"), p.Get("timestamp"), p.Get("name")
	if !s.knownLocked(ch) {
		return errBody("channel_not_found")
	}
	if s.byKey[ch+":"+ts] == nil {
		return errBody("message_not_found")
	}
	if name == "" {
		return errBody("invalid_name")
	}
	key := ch + ":" + ts
	if s.reactions[key] == nil {
		s.reactions[key] = map[string]bool{}
	}
	on := s.reactions[key][name]
	if method == "reactions.add" {
		if on {
			return errBody("already_reacted")
		}
		s.reactions[key][name] = true
		s.typing[ch]++
		return okBody()
	}
	if !on {
		return errBody("no_reaction")
	}
	s.reactions[key][name] = false
	return okBody()
}

func (s *Server) completeUpload(p url.Values) apiResult {
	var files []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}
	if err := json.Unmarshal([]byte(p.Get("files")), &files); err != nil || len(files) == 0 {
		return errBody("invalid_arguments")
	}
	ch := p.Get("channel_id")
	if ch != "" && !s.knownLocked(ch) {
		return errBody("channel_not_found")
	}
	var shared []File
	var out []map[string]any
	for _, f := range files {
		u := s.uploads[f.ID]
		if u == nil || !u.done || u.deleted {
			return errBody("file_not_found")
		}
		u.Title = f.Title
		shared = append(shared, u.File)
		out = append(out, map[string]any{"id": u.ID, "title": u.Title})
	}
	if ch != "" {
		m := &message{bot: true, user: BotUserID, Posted: Posted{
			Channel: ch, TS: s.nextTS(), ThreadTS: p.Get("thread_ts"), Text: p.Get("initial_comment"),
			Files: shared, Time: time.Now(),
		}}
		s.addMessage(m)
	}
	return okBody("files", out)
}

// deleteFile deletes a file the bot uploaded and, as Slack does, takes it out of the
// messages that shared it: one left with neither files nor text is gone. Call with mu held.
func (s *Server) deleteFile(id string) apiResult {
	if s.userFiles[id] != nil {
		return errBody("cant_delete_file")
	}
	u := s.uploads[id]
	if u == nil {
		return errBody("file_not_found")
	}
	if u.deleted {
		return errBody("file_deleted")
	}
	u.deleted = true
	for _, msgs := range s.messages {
		for _, m := range msgs {
			n := len(m.Files)
			m.Files = slices.DeleteFunc(m.Files, func(f File) bool { return f.ID == id })
			if n != len(m.Files) && len(m.Files) == 0 && strings.TrimSpace(m.Text) == "" {
				m.deleted = true
			}
		}
	}
	return okBody()
}

// serveUpload takes the bytes of a file announced with files.getUploadURLExternal.
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.delay(r, "files.upload") {
		return
	}
	rec := func(status int, code string) {
		s.calls.Add(Call{Method: "files.upload", Params: url.Values{"file_id": {id}}, Status: status, Error: code, Time: time.Now()})
	}
	s.mu.Lock()
	u := s.uploads[id]
	s.mu.Unlock()
	if u == nil {
		rec(http.StatusNotFound, "file_not_found")
		http.Error(w, "unknown upload", http.StatusNotFound)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, int64(u.length)+1<<20)
	f, _, err := r.FormFile("file")
	if err != nil {
		rec(http.StatusBadRequest, "no_file")
		http.Error(w, "no file part", http.StatusBadRequest)
		return
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil || len(data) != u.length {
		rec(http.StatusBadRequest, "length_mismatch")
		http.Error(w, fmt.Sprintf("got %d bytes, announced %d", len(data), u.length), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	u.Data, u.done, u.MIME = data, true, mimeOf(u.Name)
	s.mu.Unlock()
	rec(http.StatusOK, "")
	io.WriteString(w, "OK - "+fmt.Sprint(len(data)))
}

// serveDownload serves a user's file to a request with the bot token, and otherwise
// redirects to the sign-in page, as files.slack.com does.
func (s *Server) serveDownload(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	f := s.userFiles[id]
	res, failed := s.injectedFailure("files.download")
	ok := r.Header.Get("Authorization") == "Bearer "+BotToken
	held := s.held
	status := http.StatusOK
	switch {
	case failed:
		status = res.status
	case !ok:
		status = http.StatusFound
	case f == nil:
		status = http.StatusNotFound
	}
	s.mu.Unlock()
	s.calls.Add(Call{Method: "files.download", Params: url.Values{"file": {id}}, Status: status, Time: time.Now()})
	if held != nil {
		select {
		case <-held:
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
	}
	switch {
	case failed:
		writeResult(w, res)
	case !ok:
		http.Redirect(w, r, "/signin?redir="+url.QueryEscape(r.URL.Path), http.StatusFound)
	case f == nil:
		http.NotFound(w, r)
	default:
		w.Header().Set("Content-Type", f.MIME)
		w.Write(f.Data)
	}
}

func mimeOf(name string) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".ogg", ".oga", ".opus":
		return "audio/ogg"
	case ".mp3":
		return "audio/mpeg"
	case ".m4a", ".mp4a":
		return "audio/mp4"
	case ".wav":
		return "audio/wav"
	case ".webm":
		return "audio/webm"
	case ".png":
		return "image/png"
	case ".jpg", ".jpeg":
		return "image/jpeg"
	case ".txt":
		return "text/plain"
	}
	return "application/octet-stream"
}
