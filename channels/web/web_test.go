package web_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/web"
	"gateway/channels/web/webtest"
	"gateway/internal/fakeserver"
)

func TestConformance(t *testing.T) {
	channeltest.Run(t, func(t *testing.T) channeltest.Platform { return &platform{t: t, tabs: map[string]*tab{}} })
}

// conformanceToken is the web chat's token in the conformance run, so that the suite checks
// that it never reaches the channel's logs or errors.
const conformanceToken = "conformance-web-token-0451"

// platform is the web chat's "platform": the channel served on 127.0.0.1 and, per chat, a
// browser tab played by a real WebSocket client speaking the page's protocol.
type platform struct {
	t    *testing.T
	mu   sync.Mutex
	base string
	tabs map[string]*tab
	seq  int
}

func (p *platform) Features() channeltest.Features {
	return channeltest.Features{Edits: true, Typing: true, VoiceIn: true, VoiceOut: true, VoiceMIME: "audio/ogg"}
}

func (p *platform) NewChannel(t testing.TB, env channeltest.Env) channels.Channel {
	ch := web.New(web.Config{Enabled: true, Token: conformanceToken}, web.Options{Logger: env.Logger, MediaDir: env.StateDir})
	base := webtest.Serve(t, ch)
	p.mu.Lock()
	p.base, p.tabs = base, map[string]*tab{}
	p.mu.Unlock()
	return &tabChannel{Channel: ch, p: p}
}

func (p *platform) Secrets() []string { return []string{conformanceToken} }

func (p *platform) Inject(t testing.TB, in channeltest.Inbound) string {
	t.Helper()
	tb, err := p.tab(in.ChatID)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.seq++
	id := in.ID
	if id == "" {
		id = fmt.Sprintf("m%d", p.seq)
	}
	p.mu.Unlock()
	msg := clientMsg{Type: "message", ID: id, ChatID: in.ChatID, UserID: in.UserID, Text: in.Text}
	if in.Audio != nil {
		msg.Audio = &clientAudio{MIME: in.AudioMIME, Data: base64.StdEncoding.EncodeToString(in.Audio)}
	}
	before := tb.replies(id)
	tb.write(t, msg)
	// Like a browser, wait for the server's answer to this message (ack or error).
	tb.waitFor(t, func() bool { return tb.replies(id) > before }, "a reply to message "+id)
	return id
}

func (p *platform) Posted(chatID string) []channeltest.Posted {
	p.mu.Lock()
	tb := p.tabs[chatID]
	p.mu.Unlock()
	if tb == nil {
		return nil
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]channeltest.Posted(nil), tb.posted...)
}

func (p *platform) Typing(chatID string) int {
	p.mu.Lock()
	tb := p.tabs[chatID]
	p.mu.Unlock()
	if tb == nil {
		return 0
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.typing
}

func (p *platform) FailNext(int, fakeserver.Failure) {} // Features.RateLimit is false
func (p *platform) Len(s string) int                 { return utf8.RuneCountInString(s) }

// tab returns the open tab of chat, opening it when needed.
func (p *platform) tab(chat string) (*tab, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if tb := p.tabs[chat]; tb != nil {
		return tb, nil
	}
	tb, err := openTabWith(p.t, p.base, chat, conformanceToken)
	if err != nil {
		return nil, err
	}
	p.tabs[chat] = tb
	return tb, nil
}

// tabChannel is the web channel with one difference in how the test drives it: answering a
// chat first makes sure the user has that chat open in a tab, as a browser user always does
// before the gateway can answer them, and each frame is handed back only once the tab has
// rendered it, so that Posted is exact when Send returns.
type tabChannel struct {
	*web.Channel
	p *platform
}

func (c *tabChannel) Open(ctx context.Context, target channels.Target) (channels.Stream, error) {
	tb, err := c.p.tab(target.ChatID)
	if err != nil {
		return nil, err
	}
	st, err := c.Channel.Open(ctx, target)
	if err != nil {
		return nil, err
	}
	return &tabStream{st: st, tb: tb}, nil
}

type tabStream struct {
	st channels.Stream
	tb *tab
}

func (s *tabStream) Send(ctx context.Context, f channels.Frame) error {
	s.tb.mu.Lock()
	n := s.tb.answerFrames
	s.tb.mu.Unlock()
	if err := s.st.Send(ctx, f); err != nil {
		return err
	}
	s.tb.waitFor(s.tb.t, func() bool {
		s.tb.mu.Lock()
		defer s.tb.mu.Unlock()
		return s.tb.answerFrames > n
	}, "the tab to render a "+string(f.Type)+" frame")
	return nil
}

type clientAudio struct {
	MIME string `json:"mime"`
	Data string `json:"data"`
}

type clientMsg struct {
	Type   string       `json:"type"`
	ID     string       `json:"id"`
	ChatID string       `json:"chat_id,omitempty"`
	UserID string       `json:"user_id,omitempty"`
	Text   string       `json:"text,omitempty"`
	Audio  *clientAudio `json:"audio,omitempty"`
}

type serverPart struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	MIME  string `json:"mime"`
	URL   string `json:"url"`
	Voice bool   `json:"voice"`
}

type serverFrame struct {
	Type           string             `json:"type"`
	Text           string             `json:"text"`
	Tool           *channels.ToolInfo `json:"tool"`
	Parts          []serverPart       `json:"parts"`
	ReplyTo        string             `json:"reply_to"`
	ID             string             `json:"id"`
	Voice          bool               `json:"voice"`
	ChatID         string             `json:"chat_id"`
	MaxUploadBytes int64              `json:"max_upload_bytes"`
	History        []historyEntry     `json:"history"`
}

type historyEntry struct {
	Role    string       `json:"role"`
	ID      string       `json:"id"`
	ReplyTo string       `json:"reply_to"`
	Text    string       `json:"text"`
	Voice   bool         `json:"voice"`
	Error   bool         `json:"error"`
	Parts   []serverPart `json:"parts"`
}

// tab is one browser tab on a chat: a WebSocket client that renders frames into Posted the
// way the page does (a streamed answer is one bubble that grows; audio parts are fetched).
type tab struct {
	t     testing.TB
	base  string
	token string // brought as Authorization: Bearer when set
	ws    *websocket.Conn
	done  chan struct{}

	mu           sync.Mutex
	frames       []serverFrame
	posted       []channeltest.Posted
	cur          int // index of the bubble being streamed, or -1
	typing       int
	answerFrames int
	reply        map[string]int // acks and errors per message id
	seen         int            // frames already looked at by next
	closeErr     error
}

func openTab(t testing.TB, base, chat string) (*tab, error) { return openTabWith(t, base, chat, "") }

// openTabWith opens a tab that brings token (none when "").
func openTabWith(t testing.TB, base, chat, token string) (*tab, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(base, "http") + "/ws"
	if chat != "" {
		url += "?chat_id=" + chat
	}
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: bearer(token)})
	if err != nil {
		return nil, fmt.Errorf("open a tab on chat %s: %w", chat, err)
	}
	ws.SetReadLimit(-1)
	_, data, err := ws.Read(ctx)
	var hello serverFrame
	if err == nil {
		err = json.Unmarshal(data, &hello)
	}
	if err != nil || hello.Type != "hello" || hello.ChatID != chat {
		ws.CloseNow()
		return nil, fmt.Errorf("first frame %s (%v); want hello for chat %s", data, err, chat)
	}
	tb := &tab{t: t, base: base, token: token, ws: ws, done: make(chan struct{}), cur: -1, reply: map[string]int{}}
	go tb.read()
	t.Cleanup(func() { ws.CloseNow(); <-tb.done })
	return tb, nil
}

func (tb *tab) read() {
	defer close(tb.done)
	for {
		_, data, err := tb.ws.Read(context.Background())
		if err != nil {
			tb.mu.Lock()
			tb.closeErr = err
			tb.mu.Unlock()
			return
		}
		var f serverFrame
		if err := json.Unmarshal(data, &f); err != nil {
			tb.t.Errorf("tab got a frame that is not JSON: %q", data)
			continue
		}
		tb.render(f)
	}
}

func (tb *tab) render(f serverFrame) {
	var fetched [][]byte
	for _, p := range f.Parts {
		if p.URL != "" {
			fetched = append(fetched, fetchWith(tb.t, tb.base+p.URL, tb.token))
		} else {
			fetched = append(fetched, nil)
		}
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.frames = append(tb.frames, f)
	now := time.Now()
	bubble := func() *channeltest.Posted {
		if tb.cur < 0 {
			tb.posted = append(tb.posted, channeltest.Posted{ID: fmt.Sprint(len(tb.posted) + 1), Time: now})
			tb.cur = len(tb.posted) - 1
		}
		return &tb.posted[tb.cur]
	}
	switch f.Type {
	case "hello":
		return
	case "ack":
		tb.reply[f.ReplyTo]++
		return
	case "start":
		tb.typing++
	case "delta":
		b := bubble()
		b.Text += f.Text
		b.Edits++
		b.Time = now
	case "parts":
		for i, p := range f.Parts {
			tb.posted = append(tb.posted, channeltest.Posted{
				ID: fmt.Sprint(len(tb.posted) + 1), Text: p.Text, Audio: fetched[i], Voice: p.Voice && p.Type == "audio", Time: now,
			})
		}
	case "done", "error":
		if f.Type == "error" {
			tb.reply[f.ReplyTo]++
		}
		if f.Text != "" || tb.cur >= 0 {
			b := bubble()
			if f.Text != "" {
				b.Text = f.Text
			}
			b.Time = now
		}
		tb.cur = -1
	}
	tb.answerFrames++
}

func fetch(t testing.TB, url string) []byte { return fetchWith(t, url, "") }

// fetchWith gets url bringing token (none when "").
func fetchWith(t testing.TB, url, token string) []byte {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header = bearer(token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("fetch %s: %v", url, err)
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("fetch %s: %s %v", url, resp.Status, err)
	}
	return b
}

// bearer is the Authorization header that brings token, or no header when token is "".
func bearer(token string) http.Header {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return h
}

func (tb *tab) write(t testing.TB, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tb.ws.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatalf("tab write: %v", err)
	}
}

func (tb *tab) replies(id string) int {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.reply[id]
}

// waitFor polls cond for up to 10s (the tab renders on its own goroutine).
func (tb *tab) waitFor(t testing.TB, cond func() bool, what string) {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("timed out waiting for %s", what)
			return
		}
		select {
		case <-tb.done:
			if !cond() {
				t.Errorf("tab closed while waiting for %s", what)
			}
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// next waits for the next frame of one of types (after those next already returned).
func (tb *tab) next(t testing.TB, types ...string) serverFrame {
	t.Helper()
	var got serverFrame
	tb.waitFor(t, func() bool {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		for ; tb.seen < len(tb.frames); tb.seen++ {
			for _, ty := range types {
				if tb.frames[tb.seen].Type == ty {
					got = tb.frames[tb.seen]
					tb.seen++
					return true
				}
			}
		}
		return false
	}, "a frame of type "+strings.Join(types, "/"))
	if got.Type == "" {
		t.FailNow()
	}
	return got
}

func (tb *tab) count(ty string) int {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	n := 0
	for _, f := range tb.frames {
		if f.Type == ty {
			n++
		}
	}
	return n
}

// errSink is a channeltest.Sink whose Deliver can be made to refuse.
type errSink struct {
	*channeltest.Sink
	mu     sync.Mutex
	refuse []error
}

func (s *errSink) Deliver(ctx context.Context, m *channels.Message) error {
	s.mu.Lock()
	var err error
	if len(s.refuse) > 0 {
		err, s.refuse = s.refuse[0], s.refuse[1:]
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Sink.Deliver(ctx, m)
}

// started serves a started channel on 127.0.0.1 and returns it with its base URL and sink.
func started(t *testing.T, cfg web.Config) (*web.Channel, string, *errSink) {
	t.Helper()
	ch := web.New(cfg, web.Options{MediaDir: t.TempDir()})
	base := webtest.Serve(t, ch)
	sink := &errSink{Sink: channeltest.NewSink()}
	channeltest.Start(t, ch, sink)
	return ch, base, sink
}

func TestPageIsSelfContained(t *testing.T) {
	_, base, _ := started(t, web.Config{Enabled: true})
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	for _, hook := range []string{`id="input"`, `id="send"`, `id="record"`, `data-role`} {
		if !strings.Contains(string(body), hook) {
			t.Errorf("page lacks %s", hook)
		}
	}
	for _, ext := range []string{`src="http`, `href="http`, `src="//`, `href="//`, `@import`, `url(http`} {
		if strings.Contains(string(body), ext) {
			t.Errorf("page loads an external asset (%s)", ext)
		}
	}
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'sha256-") || strings.Contains(csp, "unsafe-inline' ;") {
		t.Errorf("CSP %q does not pin the page's script", csp)
	}
	r, err := http.Get(base + "/nothing-here")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close() // an unread, unclosed body keeps the client's connection goroutines alive
	if r.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing-here = %s; the page must not swallow other paths", r.Status)
	}
}

func TestCrossOriginRefused(t *testing.T) {
	_, base, _ := started(t, web.Config{Enabled: true})
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/ws?chat_id=c1"
	dial := func(origin string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		ws, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: h})
		if ws != nil {
			ws.CloseNow()
		}
		if resp == nil {
			return 0, err
		}
		return resp.StatusCode, err
	}
	for _, origin := range []string{"http://evil.example", "https://127.0.0.1.evil.example", "null"} {
		if code, err := dial(origin); err == nil || code != http.StatusForbidden {
			t.Errorf("upgrade from origin %q: status %d err %v; want 403", origin, code, err)
		}
	}
	for _, origin := range []string{base, "http://localhost:3000", "http://[::1]:9"} {
		if code, err := dial(origin); err != nil {
			t.Errorf("upgrade from origin %q: status %d err %v; want it allowed", origin, code, err)
		}
	}
}

func TestRebindingHostRefused(t *testing.T) {
	get := func(base, host string) int {
		req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	_, base, _ := started(t, web.Config{Enabled: true})
	if code := get(base, "attacker.example:8080"); code != http.StatusForbidden {
		t.Errorf("page for Host attacker.example = %d; want 403", code)
	}
	for _, h := range []string{"localhost:8080", "127.0.0.1:8080", "[::1]:8080", "192.0.2.7"} {
		if code := get(base, h); code != http.StatusOK {
			t.Errorf("page for Host %s = %d; want 200", h, code)
		}
	}
	_, base2, _ := started(t, web.Config{Enabled: true, AllowedHosts: []string{"chat.lan"}})
	if code := get(base2, "chat.lan:8080"); code != http.StatusOK {
		t.Errorf("page for an allowed host = %d; want 200", code)
	}
}

func TestVoiceUpload(t *testing.T) {
	dir := t.TempDir()
	ch := web.New(web.Config{}, web.Options{MediaDir: dir})
	base := webtest.Serve(t, ch)
	sink := channeltest.NewSink()
	if err := ch.Start(context.Background(), sink); err != nil {
		t.Fatal(err)
	}
	defer ch.Stop(context.Background())
	tb, err := openTab(t, base, "v1")
	if err != nil {
		t.Fatal(err)
	}
	audio := []byte("\x1aE\xdf\xa3 pretend webm")
	tb.write(t, clientMsg{Type: "message", ID: "a1", ChatID: "v1", Audio: &clientAudio{MIME: "audio/webm;codecs=opus", Data: base64.StdEncoding.EncodeToString(audio)}})
	m := sink.Next(t)
	if !m.IsVoice || len(m.Parts) != 1 {
		t.Fatalf("delivered %+v; want one voice part", m)
	}
	p := m.Parts[0]
	if p.Type != channels.PartAudio || !p.Voice || p.MIME != "audio/webm" || p.Size != int64(len(audio)) ||
		!strings.HasPrefix(p.Path, dir) || string(channeltest.PartBytes(t, p)) != string(audio) {
		t.Errorf("audio part = %+v; want a voice note of type audio/webm, %d bytes, in %s", p, len(audio), dir)
	}
	if f := tb.next(t, "ack", "error"); f.Type != "ack" || f.ReplyTo != "a1" {
		t.Errorf("reply = %+v; want an ack for a1", f)
	}
}

func TestUploadTooLarge(t *testing.T) {
	_, base, sink := started(t, web.Config{MaxUploadBytes: 1000})
	tb, err := openTab(t, base, "big")
	if err != nil {
		t.Fatal(err)
	}
	tb.write(t, clientMsg{Type: "message", ID: "v1", ChatID: "big", Audio: &clientAudio{MIME: "audio/ogg", Data: base64.StdEncoding.EncodeToString(make([]byte, 1500))}})
	f := tb.next(t, "error", "ack")
	if f.Type != "error" || f.ReplyTo != "v1" || !strings.Contains(f.Text, "too large") || !strings.Contains(f.Text, "the limit is 1000 bytes") {
		t.Errorf("reply = %+v; want an error frame for v1 saying it is too large, and the limit (it read 0.0 MB)", f)
	}
	// The socket stays usable after a refused upload.
	tb.write(t, clientMsg{Type: "message", ID: "t1", ChatID: "big", Text: "still here"})
	if m := sink.Next(t); m.Text() != "still here" {
		t.Errorf("delivered %q; want the next text message only", m.Text())
	}
	// Far past the read limit the socket is closed with 1009; nothing is delivered.
	huge, _ := json.Marshal(clientMsg{Type: "message", ID: "v2", ChatID: "big", Audio: &clientAudio{MIME: "audio/ogg", Data: strings.Repeat("A", 200_000)}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tb.ws.Write(ctx, websocket.MessageText, huge) // the server may hang up mid-write
	<-tb.done
	if st := websocket.CloseStatus(tb.closeErr); st != websocket.StatusMessageTooBig {
		t.Errorf("socket closed with %v; want 1009 message too big", tb.closeErr)
	}
	sink.ExpectNone(t, 200*time.Millisecond)
}

func TestBadInputAnswered(t *testing.T) {
	_, base, sink := started(t, web.Config{})
	tb, err := openTab(t, base, "bad")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		msg  any
		want string
	}{
		{json.RawMessage(`{"type":"message","id":`), "not valid JSON"},
		{clientMsg{Type: "subscribe", ID: "x1", ChatID: "bad"}, "Unknown message type"},
		{clientMsg{Type: "message", ID: "x2", ChatID: "bad"}, "empty"},
		{clientMsg{Type: "message", ID: "x3", ChatID: "other", Text: "hi"}, "belongs to chat"},
		{clientMsg{Type: "message", ID: "x4", ChatID: "bad", Text: strings.Repeat("a", 70_000)}, "too long"},
		{clientMsg{Type: "message", ID: "x5", ChatID: "bad", Audio: &clientAudio{MIME: "text/html", Data: "PGI+"}}, "Only audio"},
		{clientMsg{Type: "message", ID: "x6", ChatID: "bad", Audio: &clientAudio{MIME: "audio/ogg", Data: "%%%"}}, "damaged"},
		{clientMsg{Type: "message", ID: "../etc", ChatID: "bad", Text: "hi"}, "needs an id"},
	}
	for _, c := range cases {
		if raw, ok := c.msg.(json.RawMessage); ok {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			tb.ws.Write(ctx, websocket.MessageText, raw)
			cancel()
		} else {
			tb.write(t, c.msg)
		}
		f := tb.next(t, "error", "ack")
		if f.Type != "error" || !strings.Contains(f.Text, c.want) {
			t.Errorf("reply to %.80v = %+v; want an error saying %q", c.msg, f, c.want)
		}
	}
	sink.ExpectNone(t, 100*time.Millisecond)
	tb.write(t, clientMsg{Type: "message", ID: "ok", ChatID: "bad", Text: "fine now"})
	if m := sink.Next(t); m.Text() != "fine now" || m.UserID != "web" {
		t.Errorf("delivered %q from %q; want the valid message from user web", m.Text(), m.UserID)
	}
}

func TestDeliverRefusedIsAnswered(t *testing.T) {
	_, base, sink := started(t, web.Config{})
	sink.refuse = []error{channels.ErrNotAccepted}
	tb, err := openTab(t, base, "busy")
	if err != nil {
		t.Fatal(err)
	}
	tb.write(t, clientMsg{Type: "message", ID: "b1", ChatID: "busy", Text: "are you there"})
	f := tb.next(t, "error", "ack")
	if f.Type != "error" || f.ReplyTo != "b1" || !strings.Contains(f.Text, "busy") {
		t.Fatalf("reply = %+v; want an error frame for b1 saying the assistant is busy", f)
	}
	// The page resends the same id; it must be taken now, not dropped as a duplicate.
	tb.write(t, clientMsg{Type: "message", ID: "b1", ChatID: "busy", Text: "are you there"})
	if m := sink.Next(t); m.ID != "b1" {
		t.Fatalf("delivered %q; want the retried b1", m.ID)
	}
	if f := tb.next(t, "error", "ack"); f.Type != "ack" {
		t.Errorf("reply to the retry = %+v; want ack", f)
	}
	// A resend after that is acknowledged again and dropped.
	tb.write(t, clientMsg{Type: "message", ID: "b1", ChatID: "busy", Text: "are you there"})
	if f := tb.next(t, "error", "ack"); f.Type != "ack" {
		t.Errorf("reply to a duplicate = %+v; want ack", f)
	}
	sink.ExpectNone(t, 100*time.Millisecond)
}

func TestFramesReachEveryTabOfTheChat(t *testing.T) {
	ch, base, _ := started(t, web.Config{})
	a, err := openTab(t, base, "shared")
	if err != nil {
		t.Fatal(err)
	}
	b, err := openTab(t, base, "shared")
	if err != nil {
		t.Fatal(err)
	}
	other, err := openTab(t, base, "elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := ch.Open(ctx, channels.Target{Channel: "web", ChatID: "shared", ReplyToID: "q1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []channels.Frame{{Type: channels.FrameStart}, {Type: channels.FrameTool, Tool: &channels.ToolInfo{ID: "t", Name: "current_time", Phase: "start"}}, {Type: channels.FrameDone, Text: "both"}} {
		if err := st.Send(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range []*tab{a, b} {
		tool := tb.next(t, "tool")
		done := tb.next(t, "done")
		if tool.Tool == nil || tool.Tool.Name != "current_time" || done.Text != "both" || done.ReplyTo != "q1" {
			t.Errorf("tab got tool %+v done %+v; want the tool step and the answer for q1", tool, done)
		}
	}
	if n := other.count("done"); n != 0 {
		t.Errorf("a tab on another chat got %d answers", n)
	}
	// Nobody is on this chat: not an error.
	st2, err := ch.Open(ctx, channels.Target{Channel: "web", ChatID: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st2.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "into the void"}); err != nil {
		t.Errorf("Send to a chat with no tab: %v", err)
	}
}

func TestMediaServedOnlyWhenPublished(t *testing.T) {
	ch, base, _ := started(t, web.Config{})
	resp, err := http.Get(base + "/media/..%2f..%2fetc%2fpasswd")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown media = %s; want 404", resp.Status)
	}
	tb, err := openTab(t, base, "m")
	if err != nil {
		t.Fatal(err)
	}
	voice := filepath.Join(t.TempDir(), "voice.ogg")
	if err := os.WriteFile(voice, []byte("OggS fake"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, _ := ch.Open(context.Background(), channels.Target{Channel: "web", ChatID: "m"})
	err = st.Send(context.Background(), channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{
		{Type: channels.PartImage, MIME: "image/png", Data: []byte("\x89PNG fake")},
		{Type: channels.PartFile, MIME: "text/html", Data: []byte("<script>alert(1)</script>")},
		{Type: channels.PartAudio, MIME: "audio/ogg", Path: "/does/not/exist.ogg"},
		{Type: channels.PartFile, Path: t.TempDir()}, // not a regular file
		{Type: channels.PartAudio, MIME: "audio/ogg", Path: voice},
	}})
	if err != nil {
		t.Fatal(err)
	}
	f := tb.next(t, "parts")
	if len(f.Parts) != 5 {
		t.Fatalf("parts frame = %+v", f)
	}
	// The file's bytes were taken when the part was sent: the page loads them after it is gone.
	if err := os.Remove(voice); err != nil {
		t.Fatal(err)
	}
	if b := fetch(t, base+f.Parts[4].URL); string(b) != "OggS fake" {
		t.Errorf("voice part served %q after its file was removed; want the bytes sent", b)
	}
	if p := f.Parts[3]; p.URL != "" || p.Type != "text" {
		t.Errorf("a directory rendered as %+v; want a text note in its place", p)
	}
	for i, want := range []string{"image/png", "application/octet-stream"} {
		resp, err := http.Get(base + f.Parts[i].URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != want || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("part %d served as %s %q; want 200 %q, nosniff", i, resp.Status, ct, want)
		}
	}
	if p := f.Parts[2]; p.URL != "" || p.Type != "text" {
		t.Errorf("missing file rendered as %+v; want a text note in its place", p)
	}
}

func TestStopClosesSockets(t *testing.T) {
	ch := web.New(web.Config{}, web.Options{MediaDir: t.TempDir()})
	base := webtest.Serve(t, ch)
	sink := channeltest.NewSink()
	if err := ch.Start(context.Background(), sink); err != nil {
		t.Fatal(err)
	}
	if !sink.WasConnected("web") {
		t.Error("Start did not report the channel connected")
	}
	tb, err := openTab(t, base, "s")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ch.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-tb.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the socket is still open after Stop")
	}
	if st := websocket.CloseStatus(tb.closeErr); st != websocket.StatusGoingAway {
		t.Errorf("socket closed with %v; want 1001 going away", tb.closeErr)
	}
	if _, err := openTab(t, base, "s"); err == nil {
		t.Error("a socket opened after Stop")
	}
	if _, err := ch.Open(ctx, channels.Target{ChatID: "s"}); err == nil {
		t.Error("Open after Stop succeeded")
	}
	if err := ch.Start(ctx, sink); err == nil || !strings.Contains(err.Error(), "web") {
		t.Errorf("Start after Stop = %v; want an error naming the channel", err)
	}
}

func TestOpenSocketsAreBounded(t *testing.T) {
	_, base, _ := started(t, web.Config{})
	for i := range 8 {
		if _, err := openTab(t, base, "many"); err != nil {
			t.Fatalf("tab %d: %v", i, err)
		}
	}
	if _, err := openTab(t, base, "many"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("ninth tab on one chat: %v; want it refused with 503", err)
	}
	if _, err := openTab(t, base, "another"); err != nil {
		t.Errorf("a tab on another chat was refused: %v", err)
	}
}

// A message sent from one tab shows in the chat's other tabs as the user's, before its
// answer, as a reload of them would show it; a message the gateway refused is reported there
// too. The sending tab is not sent its own message back, and another chat sees nothing.
func TestMessageReachesTheChatsOtherTabs(t *testing.T) {
	ch, base, sink := started(t, web.Config{})
	one, err := openTab(t, base, "pair")
	if err != nil {
		t.Fatal(err)
	}
	two, err := openTab(t, base, "pair")
	if err != nil {
		t.Fatal(err)
	}
	other, err := openTab(t, base, "elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	one.write(t, map[string]any{"type": "message", "id": "t1", "chat_id": "pair", "text": "question from tab one",
		"files": []map[string]string{{"mime": "image/png", "name": "a.png", "data": base64.StdEncoding.EncodeToString([]byte("\x89PNG pretend"))}}})
	sink.Next(t)
	one.waitFor(t, func() bool { return one.replies("t1") > 0 }, "the ack of t1")
	answer(t, ch, "pair", "t1", channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDone, Text: "you said: question from tab one"})

	u := two.next(t, "user")
	if u.ID != "t1" || u.Text != "question from tab one" || len(u.Parts) != 1 || u.Parts[0].URL == "" {
		t.Errorf("the other tab got %+v; want the question t1 with its picture", u)
	}
	if d := two.next(t, "done"); d.ReplyTo != "t1" {
		t.Errorf("after the question the other tab got %+v; want its answer", d)
	}
	one.next(t, "done")
	if n := one.count("user"); n != 0 {
		t.Errorf("the sending tab got its own message back %d times", n)
	}
	if n := other.count("user"); n != 0 {
		t.Errorf("a tab on another chat got %d messages of this one", n)
	}

	sink.refuse = []error{channels.ErrNotAccepted}
	one.write(t, clientMsg{Type: "message", ID: "t2", ChatID: "pair", Text: "refused"})
	if u := two.next(t, "user"); u.ID != "t2" {
		t.Errorf("the other tab got %+v; want the message t2", u)
	}
	if e := two.next(t, "error"); e.ReplyTo != "t2" || !strings.Contains(e.Text, "busy") {
		t.Errorf("the other tab got %+v; want to be told t2 was not taken", e)
	}
}
