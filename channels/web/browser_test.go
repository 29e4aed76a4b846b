package web_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"gateway/channels"
	"gateway/channels/web"
	"gateway/channels/web/webtest"
)

// answeringSink plays the gateway for browser tests: every delivered message is recorded
// and answered through ch.Open from a goroutine the sink owns.
type answeringSink struct {
	ch     *web.Channel
	msgs   chan *channels.Message
	answer func(ctx context.Context, st channels.Stream, m *channels.Message) error
	ctx    context.Context
	wg     sync.WaitGroup
	errs   chan error
	drop   func() int // cuts every connection, WebSockets included
}

// dropListener remembers its connections so a test can cut them all, as a network drop would
// (httptest's CloseClientConnections leaves hijacked WebSocket connections alone).
type dropListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *dropListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *dropListener) drop() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
	n := len(l.conns)
	l.conns = nil
	return n
}

func (s *answeringSink) Deliver(ctx context.Context, m *channels.Message) error {
	select {
	case s.msgs <- m:
	default:
		return channels.ErrNotAccepted
	}
	s.wg.Go(func() {
		st, err := s.ch.Open(s.ctx, channels.TargetOf(m))
		if err == nil {
			err = s.answer(s.ctx, st, m)
		}
		if err != nil {
			select {
			case s.errs <- err:
			default:
			}
		}
	})
	return nil
}

func (s *answeringSink) Connected(string, bool, error) {}

func (s *answeringSink) next(t *testing.T) *channels.Message {
	t.Helper()
	select {
	case m := <-s.msgs:
		return m
	case err := <-s.errs:
		t.Fatalf("answering failed: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the page delivered no message within 20s")
	}
	return nil
}

// serveAnswering starts a web channel on 127.0.0.1 whose sink answers with answer.
func serveAnswering(t *testing.T, answer func(ctx context.Context, st channels.Stream, m *channels.Message) error) (string, *answeringSink) {
	t.Helper()
	return serveAnsweringWith(t, web.Config{Enabled: true}, answer)
}

// serveAnsweringWith is serveAnswering with the channel's configuration given.
func serveAnsweringWith(t *testing.T, cfg web.Config, answer func(ctx context.Context, st channels.Stream, m *channels.Message) error) (string, *answeringSink) {
	t.Helper()
	ch := web.New(cfg, web.Options{MediaDir: t.TempDir()})
	mux := http.NewServeMux()
	ch.Routes(mux)
	srv := httptest.NewUnstartedServer(mux)
	lis := &dropListener{Listener: srv.Listener}
	srv.Listener = lis
	srv.Start()
	t.Cleanup(srv.Close)
	base := srv.URL
	ctx, cancel := context.WithCancel(context.Background())
	sink := &answeringSink{ch: ch, msgs: make(chan *channels.Message, 16), answer: answer, ctx: ctx, errs: make(chan error, 4), drop: lis.drop}
	if err := ch.Start(context.Background(), sink); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		sink.wg.Wait()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := ch.Stop(sctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return base, sink
}

func sendAll(ctx context.Context, st channels.Stream, gap time.Duration, frames ...channels.Frame) error {
	for _, f := range frames {
		if err := st.Send(ctx, f); err != nil {
			return err
		}
		if f.Type == channels.FrameDelta {
			select {
			case <-time.After(gap):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

func TestBrowserStreamsAnAnswer(t *testing.T) {
	deltas := []string{"Hello, ", "**world**! ", "Markup stays text: <img src=x onerror=alert(1)> ", "and `code` too."}
	full := strings.Join(deltas, "")
	base, sink := serveAnswering(t, func(ctx context.Context, st channels.Stream, m *channels.Message) error {
		frames := []channels.Frame{{Type: channels.FrameStart}}
		for _, d := range deltas {
			frames = append(frames, channels.Frame{Type: channels.FrameDelta, Text: d})
		}
		frames = append(frames, channels.Frame{Type: channels.FrameDone, Text: full})
		return sendAll(ctx, st, 150*time.Millisecond, frames...)
	})
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, webtest.Open(base), webtest.Say("hello")); err != nil {
		t.Fatal(err)
	}
	m := sink.next(t)
	chat, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.__gw.chat`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Text() != "hello" || m.ChatID != chat || m.Channel != "web" || m.UserID != "web" {
		t.Fatalf("delivered %q to chat %q from %q; want hello in the page's chat %q from web", m.Text(), m.ChatID, m.UserID, chat)
	}

	// Watch the bubble grow: some poll must catch it streaming with part of the answer.
	var partial string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		b, err := webtest.Peek(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if b != nil && b.State == "streaming" && b.Text != "" && partial == "" {
			partial = b.Text
		}
		if b != nil && b.State != "streaming" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, err := webtest.Answer(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantText := "Hello, world! Markup stays text: <img src=x onerror=alert(1)> and code too."
	if b.State != "done" || b.Text != wantText {
		t.Fatalf("answer bubble %q %q; want done %q", b.State, b.Text, wantText)
	}
	if partial == "" || len(partial) >= len(wantText) {
		t.Errorf("never saw the answer streaming (partial %q)", partial)
	}
	if !strings.Contains(b.HTML, "<strong>world</strong>") || !strings.Contains(b.HTML, "<code>code</code>") {
		t.Errorf("markdown not rendered: %s", b.HTML)
	}
	if strings.Contains(b.HTML, "<img") {
		t.Errorf("HTML from the answer reached the page as markup: %s", b.HTML)
	}
	frames, err := webtest.Frames(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.Index(frames, "start")
	if i < 0 || slices.Index(frames, "done") < i || !slices.Contains(frames[i:], "delta") {
		t.Errorf("frames %v; want start, deltas, done", frames)
	}
	userState, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-role=user]').dataset.state`))
	if err != nil || userState != "sent" {
		t.Errorf("user bubble state %q (%v); want sent after the ack", userState, err)
	}

	// A reload continues the same chat.
	if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#input")), webtest.WaitOnline(), webtest.Say("again")); err != nil {
		t.Fatal(err)
	}
	if m2 := sink.next(t); m2.ChatID != m.ChatID || m2.Text() != "again" {
		t.Errorf("after reload delivered %q in chat %q; want again in chat %q", m2.Text(), m2.ChatID, m.ChatID)
	}
	// The first answer is shown again from the chat's history; the second follows it.
	if b, err := webtest.Answer(ctx, 0); err != nil || b.Text != wantText {
		t.Fatalf("first answer after the reload: %+v %v", b, err)
	}
	if _, err := webtest.Answer(ctx, 1); err != nil {
		t.Fatal(err)
	}

	// The connection drops (server restart, Wi-Fi): the page reconnects on its own, and a
	// message typed around the drop arrives exactly once.
	if sink.drop() == 0 {
		t.Fatal("no connection to drop")
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!window.__gw.open`, chromedp.WithPollingInterval(10*time.Millisecond), chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		t.Fatalf("the page did not notice the drop: %v", err)
	}
	if err := chromedp.Do(ctx, webtest.Say("after the drop")); err != nil {
		t.Fatal(err)
	}
	if m3 := sink.next(t); m3.Text() != "after the drop" || m3.ChatID != m.ChatID {
		t.Errorf("after the drop delivered %q in chat %q", m3.Text(), m3.ChatID)
	}
	if b, err := webtest.Answer(ctx, 2); err != nil || b.State != "done" {
		t.Fatalf("answer after the drop: %+v %v", b, err)
	}
	select {
	case m4 := <-sink.msgs:
		t.Errorf("delivered %q again; a resent message must be delivered once", m4.Text())
	case <-time.After(300 * time.Millisecond):
	}
}

func TestBrowserVoiceNote(t *testing.T) {
	reply := oggPayload()
	base, sink := serveAnswering(t, func(ctx context.Context, st channels.Stream, m *channels.Message) error {
		return sendAll(ctx, st, 0,
			channels.Frame{Type: channels.FrameStart},
			channels.Frame{Type: channels.FrameDelta, Text: "I heard you."},
			channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartAudio, MIME: "audio/ogg", Data: reply, Voice: true}}},
			channels.Frame{Type: channels.FrameDone, Text: "I heard you."})
	})
	ctx := webtest.Browser(t, webtest.FakeMicrophone("")...)
	if err := chromedp.Do(ctx, webtest.Open(base), chromedp.Click(chromedp.CSS("#record"))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('record').dataset.state === 'recording'`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("recording did not start: %v", err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#record"))); err != nil {
		t.Fatal(err)
	}
	m := sink.next(t)
	var audio *channels.Part
	for i := range m.Parts {
		if m.Parts[i].Type == channels.PartAudio {
			audio = &m.Parts[i]
		}
	}
	if audio == nil || !audio.Voice || !m.IsVoice {
		t.Fatalf("delivered %+v; want a voice note", m)
	}
	b, err := os.ReadFile(audio.Path)
	if err != nil || len(b) == 0 || int64(len(b)) != audio.Size || !strings.HasPrefix(audio.MIME, "audio/") {
		t.Fatalf("voice note %+v: %d bytes on disk (%v); want the recording", audio, len(b), err)
	}

	ans, err := webtest.Answer(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ans.State != "done" || ans.Text != "I heard you." {
		t.Errorf("answer %+v", ans)
	}
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](
		`(async () => { const a = document.querySelector('[data-role=assistant] audio'); if (!a) return 0; return (await fetch(a.src)).status; })()`,
		chromedp.EvalAwaitPromise))
	if err != nil || status != 200 {
		t.Errorf("the answer's voice note: player fetch status %d (%v); want an <audio> player whose source loads", status, err)
	}
}

// oggPayload is a stand-in for TTS audio: the player needs only a URL that loads.
func oggPayload() []byte {
	b := make([]byte, 4096)
	copy(b, "OggS")
	return b
}
