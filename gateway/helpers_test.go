package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"gateway/channels"
	"gateway/channels/web"
	"gateway/harness"
	"gateway/hooks"
	"gateway/profiles"
)

// memChannel is an in-memory platform for tests that need more chats than a browser has
// tabs: Inject delivers like an adapter would; every frame sent to a chat is recorded.
type memChannel struct {
	sink channels.Sink
	mu   sync.Mutex
	byID map[string][]channels.Frame
	done chan string // chat id, once per done/error frame
}

func newMemChannel() *memChannel {
	return &memChannel{byID: map[string][]channels.Frame{}, done: make(chan string, 10_000)}
}

func (m *memChannel) Name() string { return "mem" }
func (m *memChannel) Start(ctx context.Context, sink channels.Sink) error {
	m.sink = sink
	sink.Connected("mem", true, nil)
	return nil
}
func (m *memChannel) Stop(context.Context) error { return nil }
func (m *memChannel) Open(ctx context.Context, t channels.Target) (channels.Stream, error) {
	return memStream{m: m, chat: t.ChatID}, nil
}

type memStream struct {
	m    *memChannel
	chat string
}

func (s memStream) Send(ctx context.Context, f channels.Frame) error {
	if err := ctx.Err(); err != nil { // as a real platform call would
		return err
	}
	s.m.mu.Lock()
	s.m.byID[s.chat] = append(s.m.byID[s.chat], f)
	s.m.mu.Unlock()
	if f.Type == channels.FrameDone || f.Type == channels.FrameError {
		s.m.done <- s.chat
	}
	return nil
}

func (m *memChannel) inject(t testing.TB, chat, id, text string) {
	t.Helper()
	err := m.sink.Deliver(context.Background(), &channels.Message{
		ID: id, Channel: "mem", ChatID: chat, UserID: "u" + chat, ChatType: channels.ChatDM,
		Parts: []channels.Part{channels.TextPart(text)},
	})
	if err != nil {
		t.Fatalf("deliver: %v", err)
	}
}

// frames returns what chat received so far.
func (m *memChannel) frames(chat string) []channels.Frame {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]channels.Frame(nil), m.byID[chat]...)
}

// finals returns the texts of the done/error frames chat received, in order.
func (m *memChannel) finals(chat string) []string {
	var out []string
	for _, f := range m.frames(chat) {
		if f.Type == channels.FrameDone || f.Type == channels.FrameError {
			out = append(out, string(f.Type)+":"+f.Text)
		}
	}
	return out
}

// waitDone waits for n done/error frames in total.
func (m *memChannel) waitDone(t testing.TB, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for range n {
		select {
		case <-m.done:
		case <-deadline:
			t.Fatalf("timed out waiting for %d answers", n)
		}
	}
}

type testEnv struct {
	g       *Gateway
	fake    *harness.Fake
	bus     *hooks.Bus
	mem     *memChannel
	web     *web.Channel
	url     string
	http    *httptest.Server
	reg     *prometheus.Registry
	metrics *Metrics
	dir     string // the session store's folder
}

type envOpt func(*Config, *Runtime, *Deps)

// newEnv starts a gateway in-process with the web channel, the mem channel and a fake provider.
func newEnv(t testing.TB, opts ...envOpt) *testEnv {
	t.Helper()
	return newEnvIn(t, t.TempDir(), opts...)
}

func newEnvIn(t testing.TB, dir string, opts ...envOpt) *testEnv {
	t.Helper()
	return newEnvWith(t, dir, nil, opts...)
}

// newEnvWith also adds extra channels (platform adapters pointed at their fakes).
func newEnvWith(t testing.TB, dir string, extra []channels.Channel, opts ...envOpt) *testEnv {
	t.Helper()
	e := buildEnv(t, dir, extra, opts...)
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	return e
}

// start starts the gateway, allowing 10s.
func (e *testEnv) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.g.Start(ctx)
}

// buildEnv is newEnvWith without the start: the test starts the gateway (e.start) when
// it is ready to. The gateway is stopped when the test ends, started or not.
func buildEnv(t testing.TB, dir string, extra []channels.Channel, opts ...envOpt) *testEnv {
	t.Helper()
	store, err := harness.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{fake: harness.NewFake(), mem: newMemChannel(), reg: prometheus.NewRegistry(), dir: dir}
	e.metrics = NewMetrics(e.reg)
	e.bus = hooks.NewBus(hooks.Options{Timeout: 5 * time.Second, OnError: e.metrics.HookError})
	cfg := Config{}
	rt := &Runtime{Bus: e.bus, Profiles: profiles.Builtin(""), LLM: harness.Config{Provider: "fake", Model: "fake-1"}}
	deps := Deps{Store: store, NewProvider: func(harness.Config) (harness.Provider, error) { return e.fake, nil }, Metrics: e.metrics}
	for _, o := range opts {
		o(&cfg, rt, &deps)
	}
	e.g, err = New(cfg, rt, deps)
	if err != nil {
		t.Fatal(err)
	}
	e.web = web.New(web.Config{Enabled: true}, web.Options{MediaDir: t.TempDir()})
	e.g.AddChannel(e.web)
	e.g.AddChannel(e.mem)
	for _, ch := range extra {
		e.g.AddChannel(ch)
	}
	srv := httptest.NewServer(e.g.Handler(HTTPOptions{Gatherer: e.reg}))
	e.url, e.http = srv.URL, srv
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.g.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		srv.Close()
	})
	return e
}

// wsFrame is a frame as the web chat's wire protocol carries it.
type wsFrame struct {
	Type    string             `json:"type"`
	Text    string             `json:"text"`
	ReplyTo string             `json:"reply_to"`
	Tool    *channels.ToolInfo `json:"tool"`
	Parts   []map[string]any   `json:"parts"`
}

// wsClient is a user in the web chat: a real WebSocket client.
type wsClient struct {
	t      testing.TB
	c      *websocket.Conn
	chat   string
	frames chan wsFrame
	n      int
}

func (e *testEnv) client(t testing.TB, chat string) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(e.url, "http") + "/ws?chat_id=" + chat
	c, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(64 << 20)
	w := &wsClient{t: t, c: c, chat: chat, frames: make(chan wsFrame, 1000)}
	readCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(w.frames)
		for {
			_, data, err := c.Read(readCtx)
			if err != nil {
				return
			}
			var f wsFrame
			if json.Unmarshal(data, &f) == nil {
				w.frames <- f
			}
		}
	}()
	t.Cleanup(func() {
		stop()
		c.Close(websocket.StatusNormalClosure, "")
		<-done
	})
	if f := w.next(); f.Type != "hello" {
		t.Fatalf("first frame %q; want hello", f.Type)
	}
	return w
}

func (w *wsClient) say(text string) string {
	w.t.Helper()
	w.n++
	id := fmt.Sprintf("%s-m%d", w.chat, w.n)
	b, _ := json.Marshal(map[string]any{"type": "message", "id": id, "chat_id": w.chat, "text": text})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, b); err != nil {
		w.t.Fatal(err)
	}
	return id
}

func (w *wsClient) next() wsFrame {
	w.t.Helper()
	select {
	case f, ok := <-w.frames:
		if !ok {
			w.t.Fatal("socket closed")
		}
		return f
	case <-time.After(30 * time.Second):
		w.t.Fatal("no frame within 30s")
	}
	return wsFrame{}
}

// until reads frames up to and including the first of type typ (acks skipped).
func (w *wsClient) until(typ ...string) []wsFrame {
	w.t.Helper()
	var out []wsFrame
	for {
		f := w.next()
		if f.Type == "ack" {
			continue
		}
		out = append(out, f)
		for _, t := range typ {
			if f.Type == t {
				return out
			}
		}
	}
}

func types(fs []wsFrame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Type
	}
	return out
}
