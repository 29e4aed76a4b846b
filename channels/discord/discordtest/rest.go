package discordtest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const maxUpload = 26 << 20

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

type handler func(w http.ResponseWriter, r *http.Request, bot Bot, call *Call)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	api := func(pattern string, auth bool, h handler) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			rec := &recorder{ResponseWriter: w, status: http.StatusOK}
			call := Call{Method: r.Method, Path: r.URL.Path, Time: time.Now()}
			defer func() {
				call.Status = rec.status
				s.calls.Add(call)
			}()
			bot, ok := s.botByAuth(r.Header.Get("Authorization"))
			if auth && !ok {
				writeErr(rec, http.StatusUnauthorized, 0, "401: Unauthorized")
				return
			}
			call.Bot = bot.ID
			h(rec, r, bot, &call)
		})
	}
	api("GET /api/{v}/gateway", false, s.getGateway)
	api("GET /api/{v}/gateway/bot", true, s.getGateway)
	api("GET /api/{v}/users/{id}", true, s.getUser)
	api("GET /api/{v}/channels/{cid}", true, s.getChannel)
	api("GET /api/{v}/channels/{cid}/messages", true, s.listMessages)
	api("GET /api/{v}/channels/{cid}/messages/{mid}", true, s.getMessage)
	api("POST /api/{v}/channels/{cid}/messages", true, s.createMessage)
	api("PATCH /api/{v}/channels/{cid}/messages/{mid}", true, s.editMessage)
	api("DELETE /api/{v}/channels/{cid}/messages/{mid}", true, s.deleteMessage)
	api("POST /api/{v}/channels/{cid}/typing", true, s.postTyping)
	api("GET /api/{v}/guilds/{gid}/members/{uid}", true, s.getMember)
	api("GET /api/{v}/guilds/{gid}/roles", true, s.getRoles)
	api("GET /attachments/{cid}/{mid}/{idx}/{name}", false, s.getAttachment)
	api("PUT /api/{v}/applications/{app}/commands", true, s.putCommands)
	api("POST /api/{v}/interactions/{iid}/{token}/callback", false, s.interactionCallback)
	api("PATCH /api/{v}/webhooks/{app}/{token}/messages/{mid}", false, s.editOriginal)
	api("POST /api/{v}/webhooks/{app}/{token}", false, s.followup)
	api("/", false, func(w http.ResponseWriter, r *http.Request, _ Bot, _ *Call) {
		writeErr(w, http.StatusNotFound, 0, "404: Not Found")
	})
	mux.HandleFunc("GET /ws/", s.serveGateway)
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status, code int, msg string) {
	writeJSON(w, status, map[string]any{"code": code, "message": msg})
}

func (s *Server) getGateway(w http.ResponseWriter, r *http.Request, _ Bot, _ *Call) {
	u := "ws" + strings.TrimPrefix(s.URL, "http") + "/ws"
	if strings.HasSuffix(r.URL.Path, "/bot") {
		writeJSON(w, http.StatusOK, map[string]any{"url": u, "shards": 1,
			"session_start_limit": map[string]int{"total": 1000, "remaining": 999, "reset_after": 86_400_000, "max_concurrency": 1}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"url": u})
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request, bot Bot, _ *Call) {
	id := r.PathValue("id")
	if id == "@me" {
		id = bot.ID
	}
	s.mu.Lock()
	u := s.userLocked(id)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, u)
}

func (s *Server) getChannel(w http.ResponseWriter, r *http.Request, _ Bot, _ *Call) {
	s.mu.Lock()
	c := s.channels[r.PathValue("cid")]
	var wc wireChannel
	if c != nil {
		wc = c.wire()
	}
	s.mu.Unlock()
	if c == nil {
		writeErr(w, http.StatusNotFound, 10003, "Unknown Channel")
		return
	}
	writeJSON(w, http.StatusOK, wc)
}

func (s *Server) getMember(w http.ResponseWriter, r *http.Request, _ Bot, _ *Call) {
	if r.PathValue("gid") != s.guildID {
		writeErr(w, http.StatusNotFound, 10004, "Unknown Guild")
		return
	}
	uid := r.PathValue("uid")
	s.mu.Lock()
	u := s.userLocked(uid)
	roles := append([]string{}, s.roles[s.guildID+"/"+uid]...)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"user": u, "roles": roles, "joined_at": "2024-01-01T00:00:00Z"})
}

func (s *Server) getRoles(w http.ResponseWriter, r *http.Request, _ Bot, _ *Call) {
	if r.PathValue("gid") != s.guildID {
		writeErr(w, http.StatusNotFound, 10004, "Unknown Guild")
		return
	}
	s.mu.Lock()
	// @everyone has the guild's id, as on Discord.
	roles := []map[string]any{{"id": s.guildID, "name": "@everyone", "position": 0, "permissions": "0"}}
	for id, name := range s.roleNames {
		roles = append(roles, map[string]any{"id": id, "name": name, "position": 1, "permissions": "0"})
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, roles)
}

func (s *Server) postTyping(w http.ResponseWriter, r *http.Request, bot Bot, _ *Call) {
	if s.fail(w, r, "typing") {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.visibleLocked(w, r.PathValue("cid"), bot.ID) == nil {
		return
	}
	s.typing[r.PathValue("cid")]++
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) getAttachment(w http.ResponseWriter, r *http.Request, _ Bot, _ *Call) {
	if s.fail(w, r, "getAttachment") {
		return
	}
	s.mu.Lock()
	m := s.messages[r.PathValue("mid")]
	i, err := strconv.Atoi(r.PathValue("idx"))
	var f *File
	if m != nil && err == nil && i >= 0 && i < len(m.Files) && m.ChannelID == r.PathValue("cid") {
		f = &m.Files[i]
	}
	if r.URL.Query().Get("ex") != strconv.Itoa(s.urlGen) {
		f = nil // an expired signed URL: Discord answers 404
	}
	hold := s.holds[r.PathValue("cid")]
	if hold != nil {
		s.heldNow++
	}
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
		s.mu.Lock()
		s.heldNow--
		s.mu.Unlock()
		if r.Context().Err() != nil {
			return
		}
	}
	if f == nil {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", f.ContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(f.Data)))
	_, _ = w.Write(f.Data)
}

// HoldDownloads makes downloads of the attachments posted in channel id wait, as a slow
// CDN would, until release is called (or the client gives up). Release is also called
// when the test ends.
func (s *Server) HoldDownloads(t testing.TB, id string) (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.holds[id] = ch
	s.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.holds, id)
			s.mu.Unlock()
			close(ch)
		})
	}
	t.Cleanup(release)
	return release
}

// ExpireAttachmentURLs makes every attachment URL handed out so far answer 404, as
// Discord's signed CDN URLs do after a day; messages read again carry fresh ones.
func (s *Server) ExpireAttachmentURLs() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.urlGen++
}

// HeldDownloads is the number of attachment downloads waiting on HoldDownloads now.
func (s *Server) HeldDownloads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldNow
}

// fail consumes a scripted failure of method in the request's channel, if any, and
// answers it.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, method string) bool {
	f, ok := s.fails.Take(method, r.PathValue("cid"), func(m string) bool { return m == "createMessage" || m == "editMessage" })
	if !ok {
		return false
	}
	if f.Code() == http.StatusTooManyRequests {
		rateLimited(w, f.RetryAfter)
		return true
	}
	writeErr(w, f.Code(), 0, f.Text())
	return true
}

// rateLimited answers 429 with retry_after in the body and the headers, as Discord does.
func rateLimited(w http.ResponseWriter, after time.Duration) {
	secs := after.Seconds()
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(secs))))
	w.Header().Set("X-RateLimit-Limit", "5")
	w.Header().Set("X-RateLimit-Remaining", "0")
	w.Header().Set("X-RateLimit-Reset-After", strconv.FormatFloat(secs, 'f', 3, 64))
	w.Header().Set("X-RateLimit-Bucket", "fakebucket")
	w.Header().Set("X-RateLimit-Scope", "user")
	writeJSON(w, http.StatusTooManyRequests, map[string]any{"message": "You are being rate limited.", "retry_after": secs, "global": false})
}

type createReq struct {
	Content          *string        `json:"content"`
	Nonce            any            `json:"nonce"` // an integer or a string
	EnforceNonce     bool           `json:"enforce_nonce"`
	Flags            int            `json:"flags"`
	MessageReference *wireReference `json:"message_reference"`
	Attachments      []struct {
		ID           any     `json:"id"`
		Filename     string  `json:"filename"`
		DurationSecs float64 `json:"duration_secs"`
		Waveform     string  `json:"waveform"`
	} `json:"attachments"`
}

// readCreate reads a JSON or multipart (payload_json + files[n]) message body.
func readCreate(r *http.Request, call *Call) (createReq, []File, error) {
	var req createReq
	r.Body = http.MaxBytesReader(nil, r.Body, maxUpload)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var payload []byte
	var files []File
	switch ct {
	case "application/json":
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return req, nil, err
		}
		payload = b
	case "multipart/form-data":
		if err := r.ParseMultipartForm(maxUpload); err != nil {
			return req, nil, err
		}
		payload = []byte(r.FormValue("payload_json"))
		for i := 0; ; i++ {
			fhs := r.MultipartForm.File[fmt.Sprintf("files[%d]", i)]
			if len(fhs) == 0 {
				break
			}
			f, err := fhs[0].Open()
			if err != nil {
				return req, nil, err
			}
			data, err := io.ReadAll(f)
			f.Close()
			if err != nil {
				return req, nil, err
			}
			files = append(files, File{Name: fhs[0].Filename, ContentType: fhs[0].Header.Get("Content-Type"), Data: data})
		}
	default:
		return req, nil, fmt.Errorf("unsupported content type %q", ct)
	}
	call.Payload = payload
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &req); err != nil {
			return req, nil, err
		}
	}
	return req, files, nil
}

func invalidForm(w http.ResponseWriter, field, code, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{
		"code": 50035, "message": "Invalid Form Body",
		"errors": map[string]any{field: map[string]any{"_errors": []map[string]string{{"code": code, "message": msg}}}},
	})
}

func (s *Server) createMessage(w http.ResponseWriter, r *http.Request, bot Bot, call *Call) {
	req, files, err := readCreate(r, call)
	if err != nil {
		writeErr(w, http.StatusBadRequest, 50109, "The request body contains invalid JSON.")
		return
	}
	if s.fail(w, r, "createMessage") {
		return
	}
	content := ""
	if req.Content != nil {
		content = *req.Content
	}
	if runeLen(content) > MaxContent {
		invalidForm(w, "content", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", MaxContent))
		return
	}
	if strings.TrimSpace(content) == "" && len(files) == 0 {
		writeErr(w, http.StatusBadRequest, 50006, "Cannot send an empty message")
		return
	}
	if req.Flags&FlagVoiceMessage != 0 {
		if msg := checkVoice(req, files); msg != "" {
			writeErr(w, http.StatusBadRequest, 50161, msg)
			return
		}
		files[0].DurationSecs = req.Attachments[0].DurationSecs
		files[0].Waveform = req.Attachments[0].Waveform
	}
	nonce, ok := nonceOf(req.Nonce)
	if !ok {
		invalidForm(w, "nonce", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxNonce))
		return
	}
	cid := r.PathValue("cid")
	s.mu.Lock()
	ch := s.visibleLocked(w, cid, bot.ID)
	if ch == nil {
		s.mu.Unlock()
		return
	}
	if req.EnforceNonce && nonce != "" {
		// As Discord does: the same author's create with the same nonce within a few
		// minutes returns the message made first, and posts nothing.
		if m := s.byNonceLocked(cid, bot.ID, nonce); m != nil {
			resp := s.wireLocked(m, bot.ID, -1, 0)
			s.mu.Unlock()
			writeJSON(w, http.StatusOK, resp)
			return
		}
	}
	m := &Message{
		ID: s.newIDLocked(), ChannelID: cid, ParentID: ch.parentID, GuildID: ch.guildID,
		AuthorID: bot.ID, AuthorName: bot.Name, AuthorBot: true,
		Content: content, Flags: req.Flags, Files: files, Time: time.Now(), Nonce: nonce,
	}
	if ref := req.MessageReference; ref != nil && ref.MessageID != "" {
		target := s.messages[ref.MessageID]
		if target == nil || target.ChannelID != cid {
			if ref.FailIfNotExists == nil || *ref.FailIfNotExists {
				s.mu.Unlock()
				invalidForm(w, "message_reference", "REPLIES_UNKNOWN_MESSAGE", "Unknown message")
				return
			}
		} else {
			m.ReferenceID = ref.MessageID
		}
	}
	m.Mentions = s.parseMentionsLocked(content)
	s.storeLocked(m)
	resp := s.wireLocked(m, bot.ID, -1, 0)
	s.mu.Unlock()
	s.dispatchMessage(m)
	writeJSON(w, http.StatusOK, resp)
}

// Discord's limit on a nonce, and how long it remembers one that enforce_nonce checks.
const (
	maxNonce    = 25
	nonceWindow = 5 * time.Minute
)

// nonceOf reads a create's nonce (Discord takes an integer or a string); ok is false when it
// is longer than Discord allows.
func nonceOf(v any) (nonce string, ok bool) {
	switch v := v.(type) {
	case nil:
		return "", true
	case string:
		nonce = v
	case float64:
		nonce = strconv.FormatFloat(v, 'f', -1, 64)
	default:
		nonce = fmt.Sprint(v)
	}
	return nonce, len(nonce) <= maxNonce
}

// byNonceLocked finds author's message in cid made with nonce within nonceWindow.
func (s *Server) byNonceLocked(cid, author, nonce string) *Message {
	for i := len(s.order) - 1; i >= 0; i-- {
		m := s.messages[s.order[i]]
		if m == nil || time.Since(m.Time) > nonceWindow {
			continue
		}
		if m.ChannelID == cid && m.AuthorID == author && m.Nonce == nonce {
			return m
		}
	}
	return nil
}

// checkVoice applies Discord's rules for a voice message (flag IS_VOICE_MESSAGE).
func checkVoice(req createReq, files []File) string {
	switch {
	case len(files) != 1:
		return "Voice messages must have exactly one audio attachment"
	case req.Content != nil && *req.Content != "":
		return "Voice messages cannot have content"
	case len(req.Attachments) != 1:
		return "Voice messages need attachments[0] with duration_secs and waveform"
	case req.Attachments[0].DurationSecs <= 0:
		return "Voice messages need attachments[0].duration_secs"
	}
	wf, err := base64.StdEncoding.DecodeString(req.Attachments[0].Waveform)
	if err != nil || len(wf) == 0 || len(wf) > 256 {
		return "Voice messages need a base64 waveform of 1 to 256 samples"
	}
	if ct := files[0].ContentType; !strings.HasPrefix(ct, "audio/ogg") {
		return "Voice messages must be audio/ogg, not " + ct
	}
	return ""
}

// parseMentionsLocked finds <@id> and <@!id> in content, as Discord fills "mentions".
func (s *Server) parseMentionsLocked(content string) []string {
	var ids []string
	for rest := content; ; {
		i := strings.Index(rest, "<@")
		if i < 0 {
			return ids
		}
		rest = rest[i+2:]
		rest = strings.TrimPrefix(rest, "!")
		j := strings.IndexByte(rest, '>')
		if j <= 0 {
			continue
		}
		id := rest[:j]
		if _, err := strconv.ParseUint(id, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
}

func (s *Server) storeLocked(m *Message) {
	s.messages[m.ID] = m
	s.order = append(s.order, m.ID)
}

func (s *Server) editMessage(w http.ResponseWriter, r *http.Request, bot Bot, call *Call) {
	req, _, err := readCreate(r, call)
	if err != nil {
		writeErr(w, http.StatusBadRequest, 50109, "The request body contains invalid JSON.")
		return
	}
	if s.fail(w, r, "editMessage") {
		return
	}
	s.mu.Lock()
	m := s.messages[r.PathValue("mid")]
	switch {
	case s.visibleLocked(w, r.PathValue("cid"), bot.ID) == nil:
		s.mu.Unlock()
		return
	case m == nil || m.ChannelID != r.PathValue("cid"):
		s.mu.Unlock()
		writeErr(w, http.StatusNotFound, 10008, "Unknown Message")
		return
	case m.AuthorID != bot.ID:
		s.mu.Unlock()
		writeErr(w, http.StatusForbidden, 50005, "Cannot edit a message authored by another user")
		return
	}
	if req.Content != nil {
		if runeLen(*req.Content) > MaxContent {
			s.mu.Unlock()
			invalidForm(w, "content", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", MaxContent))
			return
		}
		if strings.TrimSpace(*req.Content) == "" && len(m.Files) == 0 {
			s.mu.Unlock()
			writeErr(w, http.StatusBadRequest, 50006, "Cannot send an empty message")
			return
		}
		m.Content = *req.Content
		m.Mentions = s.parseMentionsLocked(m.Content)
	}
	m.Edits++
	m.EditTimes = append(m.EditTimes, time.Now())
	resp := s.wireLocked(m, bot.ID, -1, 0)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) deleteMessage(w http.ResponseWriter, r *http.Request, bot Bot, _ *Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.visibleLocked(w, r.PathValue("cid"), bot.ID) == nil {
		return
	}
	m := s.messages[r.PathValue("mid")]
	if m == nil || m.ChannelID != r.PathValue("cid") {
		writeErr(w, http.StatusNotFound, 10008, "Unknown Message")
		return
	}
	if m.AuthorID != bot.ID {
		writeErr(w, http.StatusForbidden, 50013, "Missing Permissions")
		return
	}
	delete(s.messages, m.ID)
	for i, id := range s.order {
		if id == m.ID {
			s.order = append(s.order[:i:i], s.order[i+1:]...)
			break
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// listMessages answers GET /channels/{cid}/messages with Discord's paging: limit 1..100
// (default 50); with after, the messages right after that id; with before (or neither),
// the ones right before it (the newest). Discord returns them newest first, and REST
// messages carry no guild_id.
// getMessage answers GET /channels/{cid}/messages/{mid}, with attachment URLs signed afresh.
func (s *Server) getMessage(w http.ResponseWriter, r *http.Request, bot Bot, _ *Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, m := s.visibleLocked(w, r.PathValue("cid"), bot.ID), s.messages[r.PathValue("mid")]
	switch {
	case ch == nil:
	case m == nil || m.ChannelID != ch.id:
		writeErr(w, http.StatusNotFound, 10008, "Unknown Message")
	default:
		writeJSON(w, http.StatusOK, s.wireLocked(m, bot.ID, -1, 0))
	}
}

func (s *Server) listMessages(w http.ResponseWriter, r *http.Request, bot Bot, call *Call) {
	q := r.URL.Query()
	call.Query = r.URL.RawQuery
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			invalidForm(w, "limit", "NUMBER_TYPE_MAX", "int value should be between 1 and 100.")
			return
		}
		limit = n
	}
	after, before := q.Get("after"), q.Get("before")
	cid := r.PathValue("cid")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.visibleLocked(w, cid, bot.ID) == nil {
		return
	}
	var in []*Message // oldest first
	for _, id := range s.order {
		if m := s.messages[id]; m.ChannelID == cid {
			in = append(in, m)
		}
	}
	var pick []*Message
	switch {
	case after != "":
		for _, m := range in {
			if snowLess(after, m.ID) {
				pick = append(pick, m)
				if len(pick) == limit {
					break
				}
			}
		}
	default:
		for i := len(in) - 1; i >= 0; i-- {
			if before == "" || snowLess(in[i].ID, before) {
				pick = append(pick, in[i])
				if len(pick) == limit {
					break
				}
			}
		}
	}
	slices.SortFunc(pick, func(a, b *Message) int { // newest first
		switch {
		case snowLess(b.ID, a.ID):
			return -1
		case snowLess(a.ID, b.ID):
			return 1
		}
		return 0
	})
	out := make([]wireMessage, 0, len(pick))
	for _, m := range pick {
		wm := s.wireLocked(m, bot.ID, -1, 0)
		wm.GuildID = ""
		out = append(out, wm)
	}
	writeJSON(w, http.StatusOK, out)
}

// snowLess orders snowflakes (decimal, no leading zeros) by value.
func snowLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}
