package web

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coder/websocket"

	"gateway/channels"
)

// inbound is a client's message (see the package doc).
type inbound struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	ChatID string `json:"chat_id"`
	UserID string `json:"user_id"`
	Text   string `json:"text"`
	Audio  *struct {
		MIME string `json:"mime"`
		Data string `json:"data"`
	} `json:"audio"`
	// Files are pictures and documents picked, pasted or dropped into the page.
	Files []inboundFile `json:"files"`
}

type inboundFile struct {
	MIME string `json:"mime"`
	Name string `json:"name"`
	Data string `json:"data"` // base64
}

// wireFrame is one server-to-client frame.
type wireFrame struct {
	Type           string             `json:"type"`
	Text           string             `json:"text,omitempty"`
	Tool           *channels.ToolInfo `json:"tool,omitempty"`
	Parts          []wirePart         `json:"parts,omitempty"`
	ReplyTo        string             `json:"reply_to,omitempty"`
	ID             string             `json:"id,omitempty"`               // user: the client's message id
	Voice          bool               `json:"voice,omitempty"`            // user: a voice note
	ChatID         string             `json:"chat_id,omitempty"`          // hello
	MaxUploadBytes int64              `json:"max_upload_bytes,omitempty"` // hello
	MaxTextBytes   int                `json:"max_text_bytes,omitempty"`   // hello
	History        []historyEntry     `json:"history,omitempty"`          // hello: the chat so far
}

// wirePart is a part as the page renders it: media by URL, never inline.
type wirePart struct {
	Type     string  `json:"type"`
	Text     string  `json:"text,omitempty"`
	MIME     string  `json:"mime,omitempty"`
	URL      string  `json:"url,omitempty"`
	Name     string  `json:"name,omitempty"`
	Size     int64   `json:"size,omitempty"`
	Duration float64 `json:"duration,omitempty"`
	Voice    bool    `json:"voice,omitempty"`
}

// conn is one open socket (one browser tab).
type conn struct {
	ws   *websocket.Conn
	chat string // guarded by Channel.mu; "" until bound
	// greeted is closed once hello went out (or failed to): the frames of answers streaming
	// meanwhile wait for it, as the page reads them as following what hello showed.
	greeted chan struct{}
}

func newConn(ws *websocket.Conn) *conn { return &conn{ws: ws, greeted: make(chan struct{})} }

func (k *conn) send(ctx context.Context, f wireFrame) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	select {
	case <-k.greeted:
	case <-ctx.Done():
		return ctx.Err()
	}
	return k.write(ctx, f)
}

func (k *conn) write(ctx context.Context, f wireFrame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return k.ws.Write(ctx, websocket.MessageText, b)
}

// errorFrame tells the tab that its message (replyTo) was not taken, in plain words.
func (c *Channel) errorFrame(ctx context.Context, k *conn, replyTo, text string) {
	if err := k.send(ctx, wireFrame{Type: string(channels.FrameError), Text: text, ReplyTo: replyTo}); err != nil {
		c.log.Debug("error frame not written", "err", c.scrub.Wrap(err))
	}
}

func (c *Channel) serveWS(w http.ResponseWriter, r *http.Request) {
	if err := checkOrigin(r); err != nil {
		c.log.Warn("websocket refused", "err", c.scrub.Wrap(err))
		http.Error(w, "Cross-origin WebSocket connections are not allowed.", http.StatusForbidden)
		return
	}
	chat := r.URL.Query().Get("chat_id")
	if chat != "" && !validID(chat) {
		http.Error(w, "chat_id must be 1-128 characters of letters, digits and _ . : -", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	ctx, running := c.life.Enter()
	if !running {
		c.mu.Unlock()
		http.Error(w, "The web chat is not running.", http.StatusServiceUnavailable)
		return
	}
	defer c.life.Leave()
	if msg := c.fullLocked(chat); msg != "" {
		c.mu.Unlock()
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	c.mu.Unlock()

	authorized := true
	if c.cfg.Token.IsSet() {
		tok, brought := presentedToken(r)
		authorized = brought && tokenMatches(tok, c.cfg.Token.Reveal())
		if authorized {
			c.setMediaCookie(w, r)
		} else {
			c.log.Info("websocket refused: no token or a wrong one", "token_given", brought)
		}
	}
	// The origin was checked above with loopback allowed, which Accept's own check does not know.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true, Subprotocols: []string{subprotocol}})
	if err != nil {
		c.log.Debug("websocket accept failed", "err", c.scrub.Wrap(err))
		return
	}
	if !authorized {
		_ = ws.Close(statusUnauthorized, "the web chat's token is required")
		return
	}
	ws.SetReadLimit(c.readLimit)
	k := newConn(ws)
	history, err := c.register(k, chat)
	if err != nil {
		close(k.greeted)
		_ = ws.Close(websocket.StatusTryAgainLater, err.Error())
		return
	}
	defer c.unregister(k)
	defer ws.CloseNow()

	// The pinger ends with this socket, not only with the channel.
	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	c.life.Go(func(context.Context) { c.keepAlive(kctx, k) })

	hello := wireFrame{Type: "hello", ChatID: chat, MaxUploadBytes: c.cfg.MaxUploadBytes, MaxTextBytes: maxTextBytes, History: history}
	hctx, hcancel := context.WithTimeout(ctx, writeTimeout)
	err = k.write(hctx, hello)
	hcancel()
	close(k.greeted)
	if err != nil {
		return
	}
	c.log.Debug("socket open", "chat", chat)
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) {
				c.log.Info("socket closed: message over the read limit", "chat", c.chatOf(k), "limit", c.readLimit)
			} else {
				c.log.Debug("socket closed", "chat", c.chatOf(k), "status", websocket.CloseStatus(err))
			}
			return
		}
		if typ != websocket.MessageText {
			c.errorFrame(ctx, k, "", "Only JSON text messages are understood.")
			continue
		}
		c.handle(ctx, k, data)
	}
}

// keepAlive pings so that a tab that vanished (laptop lid, lost Wi-Fi) is noticed and closed.
func (c *Channel) keepAlive(ctx context.Context, k *conn) {
	t := time.NewTicker(pingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err := k.ws.Ping(pctx)
		cancel()
		if err != nil {
			_ = k.ws.CloseNow()
			return
		}
	}
}

// fullLocked says why no more sockets can open on chat, or "".
func (c *Channel) fullLocked(chat string) string {
	if len(c.all) >= maxSockets {
		return "Too many web chat windows are open; close some and reload."
	}
	if chat != "" && len(c.byChat[chat]) >= maxSocketsChat {
		return "Too many windows are open on this chat; close some and reload."
	}
	return ""
}

// register admits k and returns what its hello shows of chat: the transcript, then the
// answers in progress, taken with k joining the chat so that k gets every later frame of
// them and none it is shown already.
func (c *Channel) register(k *conn, chat string) ([]historyEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.life.Running() {
		return nil, errors.New("gateway stopping")
	}
	if msg := c.fullLocked(chat); msg != "" {
		return nil, errors.New("too many windows")
	}
	c.all[k] = struct{}{}
	if chat == "" {
		return nil, nil
	}
	c.bindLocked(k, chat)
	return append(c.history.get(chat), c.inProgressLocked(chat)...), nil
}

func (c *Channel) bindLocked(k *conn, chat string) {
	k.chat = chat
	set := c.byChat[chat]
	if set == nil {
		set = map[*conn]struct{}{}
		c.byChat[chat] = set
	}
	set[k] = struct{}{}
}

// bind ties a socket opened without chat_id to the chat of its first message.
func (c *Channel) bind(k *conn, chat string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case k.chat == chat:
		return ""
	case k.chat != "":
		return fmt.Sprintf("This window belongs to chat %q; reload the page to use another chat.", k.chat)
	case len(c.byChat[chat]) >= maxSocketsChat:
		return "Too many windows are open on this chat; close some and reload."
	}
	c.bindLocked(k, chat)
	return ""
}

func (c *Channel) unregister(k *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.all, k)
	if set := c.byChat[k.chat]; set != nil {
		delete(set, k)
		if len(set) == 0 {
			delete(c.byChat, k.chat)
		}
	}
}

func (c *Channel) chatOf(k *conn) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return k.chat
}

// handle validates one client message and delivers it. Every outcome is answered: ack when
// the gateway took it, an error frame with the reason otherwise.
func (c *Channel) handle(ctx context.Context, k *conn, data []byte) {
	var in inbound
	if err := json.Unmarshal(data, &in); err != nil {
		c.errorFrame(ctx, k, "", "That message could not be read: it is not valid JSON.")
		return
	}
	reply := in.ID
	if !validID(in.ID) {
		reply = ""
	}
	if in.Type != "message" {
		c.errorFrame(ctx, k, reply, fmt.Sprintf("Unknown message type %q; expected \"message\".", trunc(in.Type, 32)))
		return
	}
	if !validID(in.ID) {
		c.errorFrame(ctx, k, "", "Every message needs an id of 1-128 letters, digits or _ . : -")
		return
	}
	chat := in.ChatID
	if chat == "" {
		chat = c.chatOf(k)
	}
	if !validID(chat) {
		c.errorFrame(ctx, k, reply, "Every message needs a chat_id of 1-128 letters, digits or _ . : -")
		return
	}
	if msg := c.bind(k, chat); msg != "" {
		c.errorFrame(ctx, k, reply, msg)
		return
	}
	user := in.UserID
	if user == "" {
		user = "web"
	}
	if !validID(user) {
		c.errorFrame(ctx, k, reply, "user_id must be 1-128 letters, digits or _ . : -")
		return
	}
	if len(in.Text) > maxTextBytes {
		c.errorFrame(ctx, k, reply, fmt.Sprintf("Your message is too long (%d KB); the limit is %d KB.", len(in.Text)>>10, maxTextBytes>>10))
		return
	}
	var audio []byte
	var audioMIME string
	if in.Audio != nil {
		var reason string
		audio, audioMIME, reason = c.decodeAudio(in.Audio.MIME, in.Audio.Data)
		if reason != "" {
			c.errorFrame(ctx, k, reply, reason)
			return
		}
	}
	files, reason := c.decodeFiles(in.Files, int64(len(audio)))
	if reason != "" {
		c.errorFrame(ctx, k, reply, reason)
		return
	}
	if strings.TrimSpace(in.Text) == "" && audio == nil && len(files) == 0 {
		c.errorFrame(ctx, k, reply, "The message is empty: type something, attach a file or record a voice note.")
		return
	}

	key := chat + "\x00" + in.ID
	if c.dedup.Seen(key) {
		// A resend after a reconnect: the first copy was taken, so confirm again and drop this one.
		c.log.Debug("redelivered message dropped", "chat", chat, "id", in.ID)
		_ = k.send(ctx, wireFrame{Type: "ack", ReplyTo: in.ID})
		return
	}

	msg := &channels.Message{
		ID:       in.ID,
		Channel:  Name,
		ChatID:   chat,
		UserID:   user,
		UserName: user,
		ChatType: channels.ChatDM,
		Time:     time.Now(),
	}
	if in.Text != "" {
		msg.Parts = append(msg.Parts, channels.TextPart(in.Text))
	}
	var saved []string // uploads written for this message, forgotten if it is not taken
	if audio != nil {
		path, err := c.saveUpload(audio, extFor(audioMIME))
		if err != nil {
			c.dedup.Forget(key)
			c.log.Error("voice note not saved", "chat", chat, "err", c.scrub.Wrap(err))
			c.errorFrame(ctx, k, reply, "The voice note could not be saved on the server; please try again.")
			return
		}
		saved = append(saved, path)
		msg.Parts = append(msg.Parts, channels.Part{
			Type: channels.PartAudio, MIME: audioMIME, Path: path, Size: int64(len(audio)), Voice: true,
		})
		msg.IsVoice = true
	}

	var shown []wirePart // what the transcript shows of the files
	for _, f := range files {
		path, err := c.saveUpload(f.data, f.ext)
		if err != nil {
			c.dedup.Forget(key)
			for _, p := range saved {
				c.media.forget(p)
			}
			c.log.Error("attachment not saved", "chat", chat, "err", err)
			c.errorFrame(ctx, k, reply, "The attachment could not be saved on the server; please try again.")
			return
		}
		saved = append(saved, path)
		p := channels.Part{Type: f.typ, MIME: f.mime, Path: path, Name: f.name, Size: int64(len(f.data))}
		msg.Parts = append(msg.Parts, p)
		wp := wirePart{Type: string(p.Type), MIME: p.MIME, Name: p.Name, Size: p.Size}
		if p.Type == channels.PartImage {
			if pub, err := c.publish(p); err == nil {
				wp = pub
			}
		}
		shown = append(shown, wp)
	}

	// The transcript takes the message before the gateway does, so that it precedes its answer.
	if startsOver(in.Text) {
		c.history.clear(chat)
	}
	c.history.add(chat, historyEntry{Role: "user", ID: in.ID, Text: in.Text, Voice: audio != nil, Parts: shown})
	// The chat's other tabs show the message as the user's too, written before the gateway
	// has it so that it comes before its answer there as well.
	c.broadcastExcept(ctx, chat, k, wireFrame{Type: "user", ID: in.ID, Text: in.Text, Voice: audio != nil, Parts: shown})

	// Asked first: draining then, the gateway keeps what it takes for after the restart.
	draining := channels.IsDraining(c.sink)
	dctx, cancel := context.WithTimeout(ctx, deliverTimeout)
	err := c.sink.Deliver(dctx, msg)
	cancel()
	if err != nil {
		c.history.remove(chat, in.ID)
		// The other tabs showed it: they say why it went nowhere, as the sender's tab does.
		c.broadcastExcept(ctx, chat, k, wireFrame{Type: string(channels.FrameError), Text: deliverFailure(err, ctx), ReplyTo: in.ID})
		c.dedup.Forget(key) // so that the user's retry is taken
		for _, p := range saved {
			c.media.forget(p)
		}
		c.log.Warn("message not taken by the gateway", "chat", chat, "id", in.ID, "err", c.scrub.Wrap(err))
		c.errorFrame(ctx, k, reply, deliverFailure(err, ctx))
		return
	}
	_ = k.send(ctx, wireFrame{Type: "ack", ReplyTo: in.ID})
	if draining {
		c.tellRestarting(ctx, msg)
	}
}

// restartNotice answers at once a message taken while the gateway drains for a restart: its
// answer comes only after the restart, and without a word the user would likely send it again.
const restartNotice = "I'm restarting; I'll answer this message when I'm back in a moment."

// tellRestarting shows restartNotice as the answer to msg, in every tab of its chat.
func (c *Channel) tellRestarting(ctx context.Context, msg *channels.Message) {
	st, err := c.Open(ctx, channels.TargetOf(msg))
	if err == nil {
		err = st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: restartNotice})
	}
	if err != nil {
		c.log.Debug("restart notice not shown", "chat", msg.ChatID, "err", c.scrub.Wrap(err))
	}
}

// deliverFailure explains a refused message to the user.
func deliverFailure(err error, ctx context.Context) string {
	switch {
	case ctx.Err() != nil, errors.Is(err, channels.ErrStopping):
		// ErrStopping: the gateway drains its turns before it restarts and has no journal
		// to keep the message in; "busy" would send the user back too soon.
		return "The gateway is shutting down, so your message was not taken. Please send it again in a moment."
	case errors.Is(err, channels.ErrNotAccepted):
		return "The assistant is busy and could not take your message right now. Please try again in a moment."
	case errors.Is(err, context.DeadlineExceeded):
		return "The assistant did not take your message in time. Please try again."
	default:
		return "Your message could not be delivered. Please try again."
	}
}

// decodeAudio checks and decodes an uploaded voice note; reason is set when it is refused.
func (c *Channel) decodeAudio(mimeType, data string) (audio []byte, base, reason string) {
	limit := c.cfg.MaxUploadBytes
	if n := int64(base64.StdEncoding.DecodedLen(len(data))); n > limit+3 {
		return nil, "", tooLarge(n, limit)
	}
	mt, _, err := mime.ParseMediaType(mimeType)
	if err != nil || !strings.HasPrefix(mt, "audio/") || len(mt) > 64 {
		return nil, "", fmt.Sprintf("Only audio can be uploaded (the type given was %q).", trunc(mimeType, 64))
	}
	audio, err = base64.StdEncoding.DecodeString(data)
	if err != nil {
		return nil, "", "The voice note arrived damaged (bad base64); please record it again."
	}
	if int64(len(audio)) > limit {
		return nil, "", tooLarge(int64(len(audio)), limit)
	}
	if len(audio) == 0 {
		return nil, "", "The voice note is empty; please record it again."
	}
	return audio, mt, ""
}

func tooLarge(n, limit int64) string {
	return fmt.Sprintf("That voice note is too large (%s); the limit is %s. Please send a shorter one.",
		channels.OverSize(n, limit), channels.HumanSize(limit))
}

// maxFiles bounds the attachments of one message.
const maxFiles = 10

type upload struct {
	typ  channels.PartType
	mime string
	name string
	ext  string
	data []byte
}

// decodeFiles checks and decodes a message's attachments; with the voice note (already
// bytes) they share one max_upload_bytes. reason is set when they are refused.
func (c *Channel) decodeFiles(in []inboundFile, used int64) (out []upload, reason string) {
	if len(in) > maxFiles {
		return nil, fmt.Sprintf("That is %d files at once; the limit is %d per message.", len(in), maxFiles)
	}
	limit := c.cfg.MaxUploadBytes
	for _, f := range in {
		name := strings.TrimSpace(filepath.Base(strings.ReplaceAll(f.Name, "\\", "/")))
		if name == "." || name == "/" || name == "" {
			name = "file"
		}
		name = trunc(name, 120)
		if used+int64(base64.StdEncoding.DecodedLen(len(f.Data))) > limit+3 {
			return nil, filesTooLarge(name, limit)
		}
		b, err := base64.StdEncoding.DecodeString(f.Data)
		if err != nil {
			return nil, fmt.Sprintf("The file %s arrived damaged (bad base64); please attach it again.", name)
		}
		if len(b) == 0 {
			return nil, fmt.Sprintf("The file %s is empty.", name)
		}
		used += int64(len(b))
		if used > limit {
			return nil, filesTooLarge(name, limit)
		}
		mt, _, err := mime.ParseMediaType(f.MIME)
		if err != nil || mt == "" || len(mt) > 100 {
			mt = mime.TypeByExtension(strings.ToLower(filepath.Ext(name)))
			if mt, _, err = mime.ParseMediaType(mt); err != nil || mt == "" {
				mt = "application/octet-stream"
			}
		}
		typ := channels.PartFile
		switch {
		case strings.HasPrefix(mt, "image/") && mt != "image/svg+xml":
			typ = channels.PartImage
		case strings.HasPrefix(mt, "audio/"):
			// A recording made elsewhere: transcribed as on every other platform, though
			// no voice note (the answer is not spoken for it).
			typ = channels.PartAudio
		}
		out = append(out, upload{typ: typ, mime: mt, name: name, ext: fileExt(name), data: b})
	}
	return out, ""
}

func filesTooLarge(name string, limit int64) string {
	return fmt.Sprintf("The attachments are too large with %s; the limit is %s for everything sent at once.", name, channels.HumanSize(limit))
}

// fileExt keeps a short alphanumeric extension of a user's file name, nothing else of it.
func fileExt(name string) string {
	ext := strings.ToLower(filepath.Ext(name))
	if len(ext) < 2 || len(ext) > 10 {
		return ".bin"
	}
	for _, r := range ext[1:] {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return ".bin"
		}
	}
	return ext
}

// saveUpload writes an uploaded voice note or attachment under the media directory.
func (c *Channel) saveUpload(b []byte, ext string) (string, error) {
	c.mu.Lock()
	dir := c.mediaDir
	c.mu.Unlock()
	path := filepath.Join(dir, "web-"+randomID(12)+ext)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", err
	}
	c.media.addUpload(path, int64(len(b)))
	return path, nil
}

func extFor(mimeType string) string {
	switch mimeType {
	case "audio/webm":
		return ".webm"
	case "audio/ogg", "audio/opus":
		return ".ogg"
	case "audio/mp4", "audio/m4a", "audio/x-m4a", "audio/aac":
		return ".m4a"
	case "audio/mpeg", "audio/mp3":
		return ".mp3"
	case "audio/wav", "audio/wave", "audio/x-wav":
		return ".wav"
	}
	return ".audio"
}

// validID accepts the ids the protocol allows: short, and safe in logs and file names.
func validID(s string) bool {
	if s == "" || len(s) > maxIDLen {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.', r == ':':
		default:
			return false
		}
	}
	return true
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
