// Package channeltest is the conformance suite every channel adapter passes against its
// fake platform server. An adapter's test calls Run with a Platform for its fake; Features
// says what the platform cannot do so that those cases are skipped, never faked.
package channeltest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/channels"
	"gateway/internal/fakeserver"
)

// Features says what a platform supports.
type Features struct {
	Edits     bool // streams by editing one message
	Typing    bool // shows a typing indicator on start
	VoiceIn   bool // users can send voice notes / audio
	VoiceOut  bool // the bot can send native voice notes
	Groups    bool // group chats with a mention gate
	Threads   bool // threads/topics map to ThreadID
	RateLimit bool // the fake can fail sends: 429 with retry_after, and 5xx
	Access    bool // the adapter enforces allow_from (platforms with user ids; not the local web chat)
	Tokens    bool // the adapter authenticates with a token the fake can reject
	MaxLen    int  // text limit of one message, in the platform's unit (see Platform.Len)
	// VoiceMIME is the MIME type an audio part must carry to be sent as a native voice note.
	VoiceMIME string
}

// Env is what the suite hands the adapter under test.
type Env struct {
	Access   channels.Access
	Logger   *slog.Logger
	StateDir string
	BadToken bool // configure a token the fake rejects
	// State, when not nil, is the durable state to give the adapter (Options.State); the
	// same one across a restart within a case.
	State channels.State
}

// Inbound is a user's message injected into the fake platform.
type Inbound struct {
	ID        string // platform message/update id; "" lets the fake choose. Reuse it to redeliver.
	ChatID    string
	ThreadID  string
	UserID    string
	Group     bool
	Mention   bool // mention the bot the platform's native way
	Text      string
	Audio     []byte // a voice note when set
	AudioMIME string
}

// Posted is a message the bot has on the platform, as a user would see it now.
type Posted struct {
	ID       string
	ChatID   string
	ThreadID string
	Text     string // after every edit, in the platform's format
	Edits    int
	Audio    []byte // voice note payload
	Voice    bool   // sent as a native voice note, not a plain file
	Time     time.Time
}

// Platform drives one fake platform server.
type Platform interface {
	Features() Features
	// NewChannel returns an adapter for this fake, not yet started.
	NewChannel(t testing.TB, env Env) channels.Channel
	// Secrets are the tokens the adapter was given; none may appear in its logs or errors.
	Secrets() []string
	// Inject sends a user message into the fake and returns its platform id.
	Inject(t testing.TB, in Inbound) string
	// Posted lists what the bot has in chat, oldest first.
	Posted(chatID string) []Posted
	// Typing reports how many typing signals the bot sent to chat.
	Typing(chatID string) int
	// FailNext makes the next n calls f applies to fail (f.Method "" is the
	// message-sending calls), rendered in the platform's wire form: 429 with f.RetryAfter
	// when it is set, else a 5xx unless f.Status says otherwise.
	FailNext(n int, f fakeserver.Failure)
	// Len measures text in the platform's limit unit (runes, UTF-16 units, ...).
	Len(s string) int
}

// ChatAdder is a Platform whose fake knows its chats, as the platform does: a send to a
// chat no user wrote in, and none was added, is refused with the platform's own answer
// (Telegram's 400 chat not found, Discord's 404 Unknown Channel, Slack's channel_not_found). The suite adds the chats it
// answers without a user message first, and checks the refusal (case UnknownChat).
type ChatAdder interface {
	// AddChat makes chatID a DM the bot may post in before the user wrote there.
	AddChat(chatID string)
}

// Run runs the conformance suite. newPlatform starts a fresh fake for each case.
func Run(t *testing.T, newPlatform func(t *testing.T) Platform) {
	cases := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"TextRoundTrip", testTextRoundTrip},
		{"StreamingEdits", testStreamingEdits},
		{"LongReplySplit", testLongReplySplit},
		{"VoiceIn", testVoiceIn},
		{"VoiceOut", testVoiceOut},
		{"Allowlist", testAllowlist},
		{"StrangerToldOnceAcrossRestart", testStrangerAcrossRestart},
		{"MentionGate", testMentionGate},
		{"Threads", testThreads},
		{"RateLimit", testRateLimit},
		{"ServerErrorRetry", testServerErrorRetry},
		{"Redelivery", testRedelivery},
		{"BadTokenError", testBadToken},
		{"UnknownChat", testUnknownChat},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPlatform(t)
			h := &harness{t: t, p: p, f: p.Features(), logs: &LogBuffer{}}
			t.Cleanup(func() { h.assertNoSecrets(h.logs.String(), "logs") })
			c.fn(t, h)
		})
	}
}

// Allowed is the user id the suite's default access policy allows.
const Allowed = "1001"

type harness struct {
	t     *testing.T
	p     Platform
	f     Features
	logs  *LogBuffer
	ch    channels.Channel
	sink  *Sink
	state channels.State // nil but in the cases about durable state
}

func (h *harness) env(access channels.Access) Env {
	return Env{
		Access:   access,
		Logger:   h.logs.Logger(),
		StateDir: h.t.TempDir(),
		State:    h.state,
	}
}

func defaultAccess() channels.Access {
	return channels.Access{AllowFrom: []string{Allowed}, DMPolicy: channels.DMAllowlist, RequireMention: true}
}

// start builds and starts the adapter with access.
func (h *harness) start(access channels.Access) {
	h.t.Helper()
	h.ch = h.p.NewChannel(h.t, h.env(access))
	h.sink = NewSink()
	Start(h.t, h.ch, h.sink)
	if !h.sink.WasConnected(h.ch.Name()) {
		h.t.Errorf("Start returned without reporting the connection (Sink.Connected(%q, true))", h.ch.Name())
	}
}

func (h *harness) assertNoSecrets(s, where string) {
	h.t.Helper()
	for _, sec := range h.p.Secrets() {
		if sec != "" && strings.Contains(s, sec) {
			h.t.Errorf("a secret appears in %s: %q", where, s)
		}
	}
}

// answer sends frames to target and fails the test on error.
func (h *harness) answer(target channels.Target, frames ...channels.Frame) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := h.ch.Open(ctx, target)
	if err != nil {
		h.assertNoSecrets(err.Error(), "Open error")
		h.t.Fatalf("Open: %v", err)
	}
	for _, f := range frames {
		if err := st.Send(ctx, f); err != nil {
			h.assertNoSecrets(err.Error(), "Send error")
			h.t.Fatalf("Send %s: %v", f.Type, err)
		}
	}
}

// dm is the target of a DM the bot answers with no user message before: the fake is told
// of the chat first when it knows its chats (ChatAdder).
func (h *harness) dm(chat string) channels.Target {
	if a, ok := h.p.(ChatAdder); ok {
		a.AddChat(chat)
	}
	return channels.Target{Channel: h.ch.Name(), ChatID: chat, ChatType: channels.ChatDM}
}

func dm(chat, text string) Inbound {
	return Inbound{ChatID: chat, UserID: Allowed, Text: text}
}

func testTextRoundTrip(t *testing.T, h *harness) {
	h.start(defaultAccess())
	h.p.Inject(t, dm("501", "hello there"))
	m := h.sink.Next(t)
	if m.Channel != h.ch.Name() || m.ChatID != "501" || m.UserID != Allowed || m.ChatType != channels.ChatDM {
		t.Fatalf("normalised message = %+v; want channel %q chat 501 user %s dm", m, h.ch.Name(), Allowed)
	}
	if m.Text() != "hello there" || m.ID == "" {
		t.Fatalf("text %q id %q; want %q and a platform id", m.Text(), m.ID, "hello there")
	}
	h.answer(channels.TargetOf(m),
		channels.Frame{Type: channels.FrameStart},
		channels.Frame{Type: channels.FrameDelta, Text: "Hi, "},
		channels.Frame{Type: channels.FrameDelta, Text: "how can I help?"},
		channels.Frame{Type: channels.FrameDone, Text: "Hi, how can I help?"})
	posted := h.p.Posted("501")
	if len(posted) != 1 || !strings.Contains(posted[0].Text, "how can I help?") {
		t.Fatalf("posted = %+v; want one message with the answer", posted)
	}
	if h.f.Typing && h.p.Typing("501") == 0 {
		t.Errorf("no typing indicator was sent on start")
	}
}

func testStreamingEdits(t *testing.T, h *harness) {
	if !h.f.Edits {
		t.Skip("platform does not stream by edits")
	}
	h.start(defaultAccess())
	target := h.dm("502")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := h.ch.Open(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(ctx, channels.Frame{Type: channels.FrameStart}); err != nil {
		t.Fatal(err)
	}
	var full strings.Builder
	// Deltas over ~3.5s so that any sane throttle (≥1s between edits) shows progress.
	for i := range 8 {
		piece := fmt.Sprintf("part%d ", i)
		full.WriteString(piece)
		if err := st.Send(ctx, channels.Frame{Type: channels.FrameDelta, Text: piece}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(450 * time.Millisecond)
	}
	sawPartial := len(h.p.Posted("502")) > 0
	if err := st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: full.String()}); err != nil {
		t.Fatal(err)
	}
	posted := h.p.Posted("502")
	if len(posted) != 1 {
		t.Fatalf("posted %d messages; want the stream edited into one", len(posted))
	}
	if !sawPartial || posted[0].Edits < 1 {
		t.Errorf("partial text shown before done: %v, edits: %d; want the answer to grow while streaming", sawPartial, posted[0].Edits)
	}
	if !strings.Contains(posted[0].Text, "part7") {
		t.Errorf("final text %q lacks the last delta", posted[0].Text)
	}
}

func testLongReplySplit(t *testing.T, h *harness) {
	if h.f.MaxLen <= 0 {
		t.Skip("platform has no text limit")
	}
	h.start(defaultAccess())
	// Numbered words, some inside a code block that straddles the limit.
	var b strings.Builder
	n := 0
	for h.p.Len(b.String()) < h.f.MaxLen*5/2 {
		if n == 40 {
			b.WriteString("\n```\n")
		}
		if n == 40+h.f.MaxLen/8 {
			b.WriteString("\n```\n")
		}
		fmt.Fprintf(&b, "w%05d ", n)
		n++
	}
	text := b.String()
	h.answer(h.dm("503"),
		channels.Frame{Type: channels.FrameStart},
		channels.Frame{Type: channels.FrameDone, Text: text})
	posted := h.p.Posted("503")
	if len(posted) < 3 {
		t.Fatalf("posted %d messages for %d units; want a split into at least 3", len(posted), h.p.Len(text))
	}
	var all strings.Builder
	for i, p := range posted {
		if l := h.p.Len(p.Text); l > h.f.MaxLen {
			t.Errorf("message %d is %d long; limit %d", i, l, h.f.MaxLen)
		}
		all.WriteString(p.Text)
		all.WriteString(" ")
	}
	joined := all.String()
	last := -1
	for i := range n {
		idx := strings.Index(joined, fmt.Sprintf("w%05d", i))
		if idx < 0 || idx < last {
			t.Fatalf("word w%05d missing or out of order in the split messages", i)
		}
		last = idx
	}
}

// oggBytes is a payload that starts like an Ogg stream and cannot be confused with text.
func oggBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	copy(b, "OggS")
	return b
}

// PartBytes reads a media part's bytes from Data or Path.
func PartBytes(t testing.TB, p channels.Part) []byte {
	t.Helper()
	if p.Data != nil {
		return p.Data
	}
	b, err := os.ReadFile(p.Path)
	if err != nil {
		t.Fatalf("read part %s: %v", p.Path, err)
	}
	return b
}

func testVoiceIn(t *testing.T, h *harness) {
	if !h.f.VoiceIn {
		t.Skip("platform has no voice notes")
	}
	h.start(defaultAccess())
	audio := oggBytes(t, 20_000)
	h.p.Inject(t, Inbound{ChatID: "504", UserID: Allowed, Audio: audio, AudioMIME: "audio/ogg"})
	m := h.sink.Next(t)
	if !m.IsVoice {
		t.Errorf("IsVoice not set on a voice note")
	}
	var got []byte
	for _, p := range m.Parts {
		if p.Type == channels.PartAudio {
			got = PartBytes(t, p)
		}
	}
	if !bytes.Equal(got, audio) {
		t.Fatalf("audio part has %d bytes; want the exact %d bytes sent", len(got), len(audio))
	}
}

func testVoiceOut(t *testing.T, h *harness) {
	if !h.f.VoiceOut {
		t.Skip("platform has no native voice notes")
	}
	h.start(defaultAccess())
	audio := oggBytes(t, 8_000)
	mime := h.f.VoiceMIME
	if mime == "" {
		mime = "audio/ogg"
	}
	h.answer(h.dm("505"),
		channels.Frame{Type: channels.FrameStart},
		channels.Frame{Type: channels.FrameDelta, Text: "spoken answer"},
		channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartAudio, MIME: mime, Data: audio, Voice: true, Duration: 1.5}}},
		channels.Frame{Type: channels.FrameDone, Text: "spoken answer"})
	var voice, text bool
	for _, p := range h.p.Posted("505") {
		if p.Voice && bytes.Equal(p.Audio, audio) {
			voice = true
		}
		if strings.Contains(p.Text, "spoken answer") {
			text = true
		}
	}
	if !voice || !text {
		t.Fatalf("posted %+v; want the text and a native voice note with the exact audio", h.p.Posted("505"))
	}
}

func testAllowlist(t *testing.T, h *harness) {
	if !h.f.Access {
		t.Skip("adapter has no allowlist")
	}
	h.start(defaultAccess())
	h.p.Inject(t, Inbound{ChatID: "506", UserID: "666", Text: "let me in"})
	h.p.Inject(t, dm("507", "allowed one"))
	m := h.sink.Next(t)
	if m.Text() != "allowed one" {
		t.Fatalf("delivered %q from user %s; the stranger's message must not reach the gateway", m.Text(), m.UserID)
	}
	h.sink.ExpectNone(t, 300*time.Millisecond)

	// dm_policy open lets anyone in.
	h2 := &harness{t: t, p: h.p, f: h.f, logs: h.logs}
	h.ch.Stop(context.Background())
	h2.start(channels.Access{DMPolicy: channels.DMOpen})
	h.p.Inject(t, Inbound{ChatID: "508", UserID: "777", Text: "public bot"})
	if m := h2.sink.Next(t); m.Text() != "public bot" {
		t.Fatalf("open policy delivered %q", m.Text())
	}
}

// testStrangerAcrossRestart: a stranger is told once an hour that they are not allowed, and
// the adapter built again on the same state (a restart) does not tell them again: a gateway
// restarting in a loop would otherwise answer each of their messages.
func testStrangerAcrossRestart(t *testing.T, h *harness) {
	if !h.f.Access {
		t.Skip("adapter has no allowlist")
	}
	h.state = NewMemState()
	h.start(defaultAccess())
	h.p.Inject(t, Inbound{ChatID: "520", UserID: "666", Text: "let me in"})
	deadline := time.Now().Add(20 * time.Second)
	for len(h.p.Posted("520")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stranger was not told that they are not allowed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.ch.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	h.start(defaultAccess())
	h.p.Inject(t, Inbound{ChatID: "520", UserID: "666", Text: "let me in, please"})
	h.p.Inject(t, dm("521", "marker"))
	if m := h.sink.Next(t); m.Text() != "marker" {
		t.Fatalf("delivered %q from user %s; want only the allowed user's message", m.Text(), m.UserID)
	}
	time.Sleep(300 * time.Millisecond) // a notice is sent off the intake
	if n := len(h.p.Posted("520")); n != 1 {
		t.Fatalf("the stranger was told %d times across the restart; want once", n)
	}
}

func testMentionGate(t *testing.T, h *harness) {
	if !h.f.Groups {
		t.Skip("platform has no groups")
	}
	h.start(defaultAccess())
	h.p.Inject(t, Inbound{ChatID: "-509", UserID: Allowed, Group: true, Text: "chatting among ourselves"})
	h.p.Inject(t, Inbound{ChatID: "-509", UserID: Allowed, Group: true, Mention: true, Text: "bot, answer this"})
	m := h.sink.Next(t)
	if !strings.Contains(m.Text(), "answer this") || !m.Mentioned || m.ChatType != channels.ChatGroup {
		t.Fatalf("delivered %+v; want only the group message that mentions the bot", m)
	}
	h.sink.ExpectNone(t, 300*time.Millisecond)
}

func testThreads(t *testing.T, h *harness) {
	if !h.f.Threads {
		t.Skip("platform has no threads")
	}
	h.start(defaultAccess())
	h.p.Inject(t, Inbound{ChatID: "-510", ThreadID: "77", UserID: Allowed, Group: true, Mention: true, Text: "in a thread"})
	m := h.sink.Next(t)
	if m.ThreadID == "" {
		t.Fatalf("ThreadID empty for a threaded message")
	}
	h.answer(channels.TargetOf(m), channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDone, Text: "threaded answer"})
	posted := h.p.Posted(m.ChatID)
	if len(posted) == 0 || posted[len(posted)-1].ThreadID != m.ThreadID {
		t.Fatalf("posted %+v; want the answer in thread %s", posted, m.ThreadID)
	}
}

func testRateLimit(t *testing.T, h *harness) {
	if !h.f.RateLimit {
		t.Skip("fake cannot rate-limit")
	}
	h.start(defaultAccess())
	const wait = 2 * time.Second
	h.p.FailNext(1, fakeserver.Failure{RetryAfter: wait})
	start := time.Now()
	h.answer(h.dm("511"),
		channels.Frame{Type: channels.FrameDone, Text: "after the limit"})
	posted := h.p.Posted("511")
	if len(posted) != 1 || !strings.Contains(posted[0].Text, "after the limit") {
		t.Fatalf("posted %+v; want the message delivered after the 429", posted)
	}
	if posted[0].Time.Sub(start) < wait {
		t.Fatalf("delivered %v after the 429; retry_after was %v", posted[0].Time.Sub(start), wait)
	}
}

func testServerErrorRetry(t *testing.T, h *harness) {
	if !h.f.RateLimit {
		t.Skip("fake cannot fail sends")
	}
	h.start(defaultAccess())
	h.p.FailNext(2, fakeserver.Failure{})
	h.answer(h.dm("512"),
		channels.Frame{Type: channels.FrameDone, Text: "despite errors"})
	posted := h.p.Posted("512")
	if len(posted) != 1 || !strings.Contains(posted[0].Text, "despite errors") {
		t.Fatalf("posted %+v; want exactly one message after two 5xx", posted)
	}
}

func testRedelivery(t *testing.T, h *harness) {
	h.start(defaultAccess())
	in := dm("513", "only once")
	in.ID = h.p.Inject(t, in)
	h.p.Inject(t, in) // the platform delivers the same update again
	h.p.Inject(t, dm("513", "next"))
	if m := h.sink.Next(t); m.Text() != "only once" {
		t.Fatalf("first = %q", m.Text())
	}
	if m := h.sink.Next(t); m.Text() != "next" {
		t.Fatalf("second = %q; the redelivered update must be dropped", m.Text())
	}
}

func testBadToken(t *testing.T, h *harness) {
	if !h.f.Tokens {
		t.Skip("adapter has no token")
	}
	env := h.env(defaultAccess())
	env.BadToken = true
	ch := h.p.NewChannel(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err := ch.Start(ctx, NewSink())
	if err == nil {
		ch.Stop(context.Background())
		t.Fatal("Start with a rejected token succeeded")
	}
	h.assertNoSecrets(err.Error(), "the start error")
	if !strings.Contains(strings.ToLower(err.Error()), ch.Name()) {
		t.Errorf("start error %q does not name the channel %q", err, ch.Name())
	}
	// The gateway fails its start on it at once instead of trying again in the background.
	if !errors.Is(err, channels.ErrPermanent) {
		t.Errorf("start error %q is not marked channels.Permanent; a rejected token will not pass by retrying", err)
	}
}

// Start starts ch with sink, allowing 10s to connect, and fails the test if it cannot.
// When the test ends ch is stopped, and a Stop that fails or takes over 10s fails the test.
func Start(t testing.TB, ch channels.Channel, sink channels.Sink) {
	t.Helper()
	if s, ok := sink.(*Sink); ok {
		s.FetchWith(t, ch)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ch.Start(ctx, sink); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ch.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

// Sink records what an adapter delivers and every connection it reports. With FetchWith
// (Start calls it) it fetches referenced media as the gateway does: per chat, in order, off
// the adapter's intake, answering a failure in the chat with the error's words.
type Sink struct {
	mu    sync.Mutex
	msgs  chan *channels.Message
	conns []Connection

	ch      channels.Channel
	fetcher channels.Fetcher
	ctx     context.Context
	chats   map[string][]*channels.Message // messages waiting on an earlier fetch, by chat
	workers sync.WaitGroup
}

// FetchWith makes the sink fetch the media references of what ch delivers, when ch is a
// channels.Fetcher, until the test ends. Call it before ch starts.
func (s *Sink) FetchWith(t testing.TB, ch channels.Channel) {
	f, ok := ch.(channels.Fetcher)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.ch, s.fetcher, s.ctx, s.chats = ch, f, ctx, map[string][]*channels.Message{}
	s.mu.Unlock()
	t.Cleanup(func() {
		cancel()
		s.workers.Wait()
	})
}

// work fetches and hands on chat's waiting messages in order until none is left.
func (s *Sink) work(chat string) {
	defer s.workers.Done()
	for {
		s.mu.Lock()
		q := s.chats[chat]
		if len(q) == 0 {
			delete(s.chats, chat)
			s.mu.Unlock()
			return
		}
		m := q[0]
		s.chats[chat] = q[1:]
		s.mu.Unlock()
		if m.HasRefs() {
			ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
			err := s.fetcher.Fetch(ctx, m)
			cancel()
			if err != nil {
				if s.ctx.Err() == nil {
					s.tell(channels.TargetOf(m), err.Error())
				}
				continue
			}
		}
		select {
		case s.msgs <- m:
		case <-s.ctx.Done():
			return
		}
	}
}

// tell answers target with a lone done frame, as the gateway tells a failed fetch.
func (s *Sink) tell(target channels.Target, text string) {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	st, err := s.ch.Open(ctx, target)
	if err == nil {
		_ = st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: text})
	}
}

// Connection is one report an adapter made through Sink.Connected.
type Connection struct {
	Channel string
	Up      bool
	Err     error
}

// NewSink returns a sink that holds up to 100 undelivered messages.
func NewSink() *Sink {
	return &Sink{msgs: make(chan *channels.Message, 100)}
}

func (s *Sink) Deliver(ctx context.Context, m *channels.Message) error {
	s.mu.Lock()
	if s.fetcher != nil {
		q, busy := s.chats[m.ChatID]
		if busy || m.HasRefs() {
			s.chats[m.ChatID] = append(q, m)
			if !busy {
				s.workers.Add(1)
				go s.work(m.ChatID)
			}
			s.mu.Unlock()
			return nil
		}
	}
	s.mu.Unlock()
	select {
	case s.msgs <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Sink) Connected(channel string, up bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns = append(s.conns, Connection{Channel: channel, Up: up, Err: err})
}

// WasConnected reports whether the channel ever reported a connection.
func (s *Sink) WasConnected(channel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.conns, func(c Connection) bool { return c.Channel == channel && c.Up })
}

// Connections returns the connection reports so far, oldest first.
func (s *Sink) Connections() []Connection {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.conns)
}

// Messages is where delivered messages wait, for a test that answers them as they come.
func (s *Sink) Messages() <-chan *channels.Message { return s.msgs }

// Next waits up to 10s for the next delivered message.
func (s *Sink) Next(t testing.TB) *channels.Message {
	t.Helper()
	select {
	case m := <-s.msgs:
		return m
	case <-time.After(30 * time.Second): // a bound only: the whole suite on two busy cores
		t.Fatal("no message delivered within 30s")
		return nil
	}
}

// ExpectNone fails if a message is delivered within d.
func (s *Sink) ExpectNone(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case m := <-s.msgs:
		t.Fatalf("unexpected message delivered: %+v", m)
	case <-time.After(d):
	}
}

// LogBuffer collects an adapter's log output; it is safe for concurrent use, so the
// adapter's goroutines may write while the test reads.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Logger logs everything, debug level included, as text into l.
func (l *LogBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testUnknownChat: an answer to a chat the platform does not know (deleted, or the bot is
// not in it) fails with an error marked channels.ErrNoChat, which tells the gateway no
// retry mends it, free of secrets; the bot still answers elsewhere.
func testUnknownChat(t *testing.T, h *harness) {
	if _, ok := h.p.(ChatAdder); !ok {
		t.Skip("the fake takes a send to any chat")
	}
	h.start(defaultAccess())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	target := channels.Target{Channel: h.ch.Name(), ChatID: "599", ChatType: channels.ChatDM}
	st, err := h.ch.Open(ctx, target)
	if err == nil {
		if err = st.Send(ctx, channels.Frame{Type: channels.FrameStart}); err == nil {
			err = st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "to nowhere"})
		}
	}
	if !errors.Is(err, channels.ErrNoChat) {
		t.Fatalf("answer to an unknown chat: %v; want an error marked channels.ErrNoChat", err)
	}
	h.assertNoSecrets(err.Error(), "the unknown chat's error")
	if p := h.p.Posted("599"); len(p) != 0 {
		t.Errorf("posted %+v in a chat the platform does not know", p)
	}
	// The refusal left the bot able to answer elsewhere.
	h.answer(h.dm("598"), channels.Frame{Type: channels.FrameDone, Text: "still here"})
	if p := h.p.Posted("598"); len(p) != 1 {
		t.Errorf("posted %d messages in a known chat after the refusal; want 1", len(p))
	}
}
