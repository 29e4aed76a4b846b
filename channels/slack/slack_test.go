package slack

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	slackgo "github.com/slack-go/slack"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/slack/slacktest"
	"gateway/internal/fakeserver"
)

// recSink is a channeltest.Sink that can refuse or slow deliveries.
type recSink struct {
	*channeltest.Sink

	mu       sync.Mutex
	failNext int
	delay    time.Duration // the next Deliver takes this long, ignoring its context
	delivers int
}

func newRecSink() *recSink { return &recSink{Sink: channeltest.NewSink()} }

func (s *recSink) Deliver(ctx context.Context, m *channels.Message) error {
	s.mu.Lock()
	s.delivers++
	fail := s.failNext > 0
	if fail {
		s.failNext--
	}
	delay := s.delay
	s.delay = 0
	s.mu.Unlock()
	if fail {
		return channels.ErrNotAccepted
	}
	time.Sleep(delay)
	return s.Sink.Deliver(context.WithoutCancel(ctx), m)
}

// reports lists the connection reports, up or down, oldest first.
func (s *recSink) reports() []bool {
	var ups []bool
	for _, c := range s.Connections() {
		ups = append(ups, c.Up)
	}
	return ups
}

func (s *recSink) deliveries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delivers
}

// testLogger logs at debug level and fails the test if a secret shows up in the log.
func testLogger(t *testing.T) *slog.Logger {
	buf := &channeltest.LogBuffer{}
	t.Cleanup(func() {
		for _, s := range []string{slacktest.BotToken, slacktest.AppToken, slacktest.SigningSecret, rejectedToken} {
			if strings.Contains(buf.String(), s) {
				t.Errorf("a secret appears in the log")
			}
		}
	})
	return buf.Logger()
}

const user = "U1001"

type started struct {
	ch        *Channel
	sink      *recSink
	eventsURL string // events mode: where Slack posts
	stateDir  string
}

// start runs an adapter against s with user allowed and mentions required in channels.
// Its sink fetches files as the gateway does, per chat, off the intake.
func start(t *testing.T, s *slacktest.Server, mutate func(*Config)) started {
	t.Helper()
	return startWith(t, s, mutate, true)
}

// startWith is start; with fetch false the sink gets messages as the gateway journals
// them, files still references.
func startWith(t *testing.T, s *slacktest.Server, mutate func(*Config), fetch bool) started {
	t.Helper()
	cfg := fakeConfig(s)
	cfg.Access = channels.Access{AllowFrom: []string{user}, DMPolicy: channels.DMAllowlist, RequireMention: true}
	if mutate != nil {
		mutate(&cfg)
	}
	st := started{stateDir: t.TempDir(), sink: newRecSink()}
	ch, err := New(cfg, Options{Logger: testLogger(t), StateDir: st.stateDir})
	if err != nil {
		t.Fatal(err)
	}
	st.ch = ch
	if cfg.Mode == ModeEvents {
		mux := http.NewServeMux()
		ch.Routes(mux)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		st.eventsURL = srv.URL + EventsPath
		s.DeliverTo(st.eventsURL)
	}
	if fetch {
		st.sink.FetchWith(t, ch)
	}
	channeltest.Start(t, ch, st.sink)
	return st
}

func answer(t *testing.T, ch *Channel, target channels.Target, frames ...channels.Frame) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := ch.Open(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		if err := st.Send(ctx, f); err != nil {
			t.Fatalf("Send %s: %v", f.Type, err)
		}
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func texts(t *testing.T, sink *recSink, n int) []string {
	t.Helper()
	var out []string
	for range n {
		out = append(out, sink.Next(t).Text())
	}
	slices.Sort(out)
	return out
}

func TestReconnectLosesAndDuplicatesNothing(t *testing.T) {
	for _, how := range []string{"disconnect", "drop"} {
		t.Run(how, func(t *testing.T) {
			s := slacktest.New(t)
			st := start(t, s, nil)
			s.DM("D1", user, "one")
			first := st.sink.Next(t)
			if first.Text() != "one" {
				t.Fatalf("first = %q", first.Text())
			}
			s.DM("D1", user, "two")
			if how == "disconnect" {
				s.Disconnect() // Slack asks the client to reconnect
			} else {
				s.Drop() // the network drops
			}
			s.DM("D1", user, "three")
			s.DM("D1", user, "four")
			if got := texts(t, st.sink, 3); !slices.Equal(got, []string{"four", "three", "two"}) {
				t.Fatalf("delivered %q after the reconnect; want two, three and four once each", got)
			}
			st.sink.ExpectNone(t, 1500*time.Millisecond) // past the fake's ack timeout
			if s.Connections() < 2 {
				t.Errorf("%d Socket Mode connections; want a reconnect", s.Connections())
			}
			for _, e := range s.Envelopes() {
				if !e.Acked {
					t.Errorf("envelope %s (%s) never acknowledged", e.ID, e.EventID)
				}
			}
			if r := st.sink.reports(); len(r) < 3 || !r[0] || slices.Index(r[1:], false) < 0 || !r[len(r)-1] {
				t.Errorf("connection reports %v; want up, down, up", r)
			}
			// The conversation goes on over the new connection.
			answer(t, st.ch, channels.TargetOf(first), channels.Frame{Type: channels.FrameDone, Text: "still here"})
			if p := s.Posted("D1"); len(p) != 1 || p[0].Text != "still here" {
				t.Fatalf("posted %+v", p)
			}
		})
	}
}

func TestUnackedEnvelopeIsRedeliveredAndAnsweredOnce(t *testing.T) {
	s := slacktest.New(t)
	s.SetAckTimeout(300 * time.Millisecond)
	st := start(t, s, nil)
	st.sink.mu.Lock()
	st.sink.failNext = 1 // the gateway cannot take the first delivery
	st.sink.mu.Unlock()
	ts := s.DM("D2", user, "retry me")
	if m := st.sink.Next(t); m.Text() != "retry me" {
		t.Fatalf("delivered %q", m.Text())
	}
	eventually(t, "the ack", func() bool { return s.Envelopes()[0].Acked })
	envs := s.Envelopes()
	if len(envs) != 1 || envs[0].Attempts != 2 {
		t.Fatalf("envelopes %+v; want one, sent twice, acked after the second", envs)
	}
	if n := st.sink.deliveries(); n != 2 {
		t.Fatalf("%d Deliver calls; want the failed one and the redelivery", n)
	}
	// Slack lost the ack and sends the same event again: acked, not delivered twice.
	s.Redeliver("D2", ts)
	eventually(t, "the redelivered envelope to be acked", func() bool {
		envs := s.Envelopes()
		return len(envs) == 2 && envs[1].Acked
	})
	st.sink.ExpectNone(t, 300*time.Millisecond)
}

func TestThreadContinuesWithoutMention(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	root := s.ChannelMessage("C1", user, "help me with this", true)
	m := st.sink.Next(t)
	if m.ThreadID != root || !m.Mentioned || m.ChatType != channels.ChatGroup || m.Text() != "help me with this" {
		t.Fatalf("delivered %+v; want the mention without its tag, threaded under %s", m, root)
	}
	answer(t, st.ch, channels.TargetOf(m),
		channels.Frame{Type: channels.FrameStart},
		channels.Frame{Type: channels.FrameDelta, Text: "sure"},
		channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartAudio, MIME: "audio/ogg", Data: []byte("OggS voice"), Voice: true}}},
		channels.Frame{Type: channels.FrameDone, Text: "sure"})
	posted := s.Posted("C1")
	if len(posted) != 2 || posted[0].ThreadTS != root || posted[0].Text != "sure" {
		t.Fatalf("posted %+v; want the answer in a thread under the question", posted)
	}
	if f := posted[1].Files; posted[1].ThreadTS != root || len(f) != 1 || f[0].MIME != "audio/ogg" || string(f[0].Data) != "OggS voice" {
		t.Fatalf("voice post %+v; want the audio file in the thread", posted[1])
	}
	for _, m := range []string{"files.getUploadURLExternal", "files.upload", "files.completeUploadExternal"} {
		if len(s.Calls(m)) != 1 {
			t.Errorf("%s called %d times; want the external upload flow once", m, len(s.Calls(m)))
		}
	}

	s.ThreadReply("C1", root, user, "and one more thing", false)
	m2 := st.sink.Next(t)
	if m2.ThreadID != root || m2.Text() != "and one more thing" {
		t.Fatalf("thread reply delivered as %+v", m2)
	}
	// Elsewhere in the channel a mention is still needed.
	other := s.ChannelMessage("C1", user, "talking to people", false)
	s.ThreadReply("C1", other, user, "still people", false)
	st.sink.ExpectNone(t, 400*time.Millisecond)
}

func TestTypingSignals(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	ctx := context.Background()

	// In a thread: the assistant status, cleared at the end.
	root := s.ChannelMessage("C3", user, "q", true)
	m := st.sink.Next(t)
	stream, err := st.ch.Open(ctx, channels.TargetOf(m))
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(ctx, channels.Frame{Type: channels.FrameStart})
	if got := s.Status("C3", root); got == "" {
		t.Fatalf("no assistant status while the turn runs")
	}
	stream.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "a"})
	if got := s.Status("C3", root); got != "" {
		t.Fatalf("status %q left after done", got)
	}

	// Where Slack refuses statuses: a reaction on the user's message, removed at the end.
	s.RefuseAssistantStatus(true)
	q := s.ChannelMessage("C4", user, "q2", true)
	m = st.sink.Next(t)
	stream, _ = st.ch.Open(ctx, channels.TargetOf(m))
	stream.Send(ctx, channels.Frame{Type: channels.FrameStart})
	if r := s.Reactions("C4", q); !slices.Equal(r, []string{typingReaction}) {
		t.Fatalf("reactions %v while the turn runs; want %s", r, typingReaction)
	}
	if err := stream.Send(ctx, channels.Frame{Type: channels.FrameError, Text: "the model is down"}); err != nil {
		t.Fatal(err)
	}
	if r := s.Reactions("C4", q); len(r) != 0 {
		t.Fatalf("reactions %v left after the error", r)
	}
	if p := s.Posted("C4"); len(p) != 1 || !strings.Contains(p[0].Text, "the model is down") || p[0].ThreadTS != q {
		t.Fatalf("posted %+v; want the error as a message in the thread", p)
	}
}

// Slack reads &, < and > as markup in all message text, code included, so they are
// escaped everywhere: no <!channel> in a model's code pings anyone, and List<String>
// shows as written (Slack renders &lt; as < inside code too).
func TestMarkdownIsRenderedAsMrkdwn(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	s.AddChannel("D5")
	answer(t, st.ch, channels.Target{Channel: Name, ChatID: "D5", ChatType: channels.ChatDM},
		channels.Frame{Type: channels.FrameDone, Text: "## **Plan**\n**bold** & [docs](https://example.com) <@U999> `<!channel>` 2*3*4\n```\nList<String> a && b\n```"})
	want := "*Plan*\n\n*bold* &amp; <https://example.com|docs> &lt;@U999&gt; `&lt;!channel&gt;` 2*3*4\n\n```\nList&lt;String&gt; a &amp;&amp; b\n```"
	if p := s.Posted("D5"); len(p) != 1 || p[0].Text != want {
		t.Fatalf("posted %+v; want %q", p, want)
	}
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFiles(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, func(c *Config) { c.MaxFileBytes = 4000 })

	img := randomBytes(t, 3000)
	s.Send(slacktest.UserMessage{Channel: "D6", User: user, Text: "look", Files: []slacktest.UserFile{{Name: "pic.png", MIME: "image/png", Data: img}}})
	m := st.sink.Next(t)
	if len(m.Parts) != 2 || m.Parts[1].Type != channels.PartImage || m.IsVoice {
		t.Fatalf("parts %+v; want the text and an image", m.Parts)
	}
	if p := m.Parts[1]; !strings.HasPrefix(p.Path, st.stateDir) || p.Name != "pic.png" {
		t.Fatalf("image part %+v; want a file under the state dir", p)
	}
	if got, _ := os.ReadFile(m.Parts[1].Path); !bytes.Equal(got, img) {
		t.Fatalf("downloaded %d bytes; want the exact %d sent", len(got), len(img))
	}

	clip := randomBytes(t, 2000)
	s.AudioClip("D6", user, clip, "audio/webm")
	m = st.sink.Next(t)
	if len(m.Parts) != 1 || m.Parts[0].Type != channels.PartAudio || !m.Parts[0].Voice || m.Parts[0].MIME != "audio/webm" || !m.IsVoice {
		t.Fatalf("clip delivered as %+v", m)
	}

	// Over max_file_bytes: a plain reply, nothing delivered, nothing downloaded.
	downloads := len(s.Calls("files.download"))
	s.Send(slacktest.UserMessage{Channel: "D7", User: user, Files: []slacktest.UserFile{{Name: "big.bin", MIME: "application/octet-stream", Data: randomBytes(t, 5000)}}})
	eventually(t, "the too-large reply", func() bool { return len(s.Posted("D7")) == 1 })
	if p := s.Posted("D7"); !strings.Contains(p[0].Text, "too large") {
		t.Fatalf("reply %q", p[0].Text)
	}
	if n := len(s.Calls("files.download")); n != downloads {
		t.Errorf("the oversized file was downloaded")
	}
	// A file that turns out larger than announced is cut off at the limit.
	s.Send(slacktest.UserMessage{Channel: "D8", User: user, Files: []slacktest.UserFile{{Name: "liar.bin", MIME: "application/octet-stream", Data: randomBytes(t, 5000), Size: 100}}})
	eventually(t, "the larger-than reply", func() bool { return len(s.Posted("D8")) == 1 })
	if p := s.Posted("D8"); !strings.Contains(p[0].Text, "too large") {
		t.Fatalf("reply %q", p[0].Text)
	}
	st.sink.ExpectNone(t, 200*time.Millisecond)
	if left, _ := filepath.Glob(filepath.Join(st.stateDir, "slack", "files", "D8-*")); len(left) != 0 {
		t.Errorf("partial download left on disk: %v", left)
	}
}

func TestDownloadFailureIsRetriedThenExplained(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	s.FailNext(1, fakeserver.Failure{Method: "files.download"})
	data := randomBytes(t, 1000)
	s.AudioClip("D9", user, data, "audio/mp4")
	m := st.sink.Next(t)
	if got, _ := os.ReadFile(m.Parts[0].Path); !bytes.Equal(got, data) {
		t.Fatalf("audio after a 5xx: %d bytes; want %d", len(got), len(data))
	}
	if n := len(s.Calls("files.download")); n != 2 {
		t.Fatalf("%d download attempts; want a retry after the 5xx", n)
	}
	// A download that keeps failing: the user is told, the gateway gets nothing.
	s.FailNext(10, fakeserver.Failure{Method: "files.download"})
	s.AudioClip("D10", user, data, "audio/mp4")
	eventually(t, "the could-not-download reply", func() bool { return len(s.Posted("D10")) == 1 })
	if p := s.Posted("D10"); !strings.Contains(p[0].Text, "could not download") {
		t.Fatalf("reply %q", p[0].Text)
	}
	st.sink.ExpectNone(t, 200*time.Millisecond)
}

func TestIgnoresBotsAndStrangers(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	s.Send(slacktest.UserMessage{Channel: "D11", User: "U2", BotID: "B2", Text: "I am another bot"})
	s.Send(slacktest.UserMessage{Channel: "D11", User: slacktest.BotUserID, Text: "I am the bot itself"})
	s.ChannelMessage("C11", "U666", "stranger in a channel", true)
	s.DM("D12", "U666", "stranger in a DM")
	s.DM("D12", "U666", "stranger again")
	s.DM("D12", "U666", "and again")
	s.DM("D11", user, "a person")
	if m := st.sink.Next(t); m.Text() != "a person" {
		t.Fatalf("delivered %q; bots, the bot itself and strangers must be ignored", m.Text())
	}
	st.sink.ExpectNone(t, 300*time.Millisecond)
	eventually(t, "the not-allowed reply", func() bool { return len(s.Posted("D12")) > 0 })
	if p := s.Posted("D12"); len(p) != 1 || !strings.Contains(p[0].Text, "U666") {
		t.Fatalf("DM stranger got %+v; want the not-allowed reply naming their id", p)
	}
	if p := s.Posted("C11"); len(p) != 0 {
		t.Fatalf("a stranger in a channel got %+v; channels stay silent", p)
	}
}

func TestInvalidAuthAtStart(t *testing.T) {
	s := slacktest.New(t)
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"bot token", func(c *Config) { c.BotToken = rejectedToken }, "slack: the bot token was rejected (invalid_auth); check channels.slack.bot_token"},
		{"app token", func(c *Config) { c.AppToken = "xapp-1-wrong-app-token" }, "slack: the app token was rejected (invalid_auth); check channels.slack.app_token"},
		{"bot token, events mode", func(c *Config) {
			c.BotToken, c.Mode, c.SigningSecret = rejectedToken, ModeEvents, slacktest.SigningSecret
		}, "slack: the bot token was rejected (invalid_auth); check channels.slack.bot_token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := fakeConfig(s)
			c.mutate(&cfg)
			ch, err := New(cfg, Options{Logger: testLogger(t), StateDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = ch.Start(ctx, newRecSink())
			if err == nil {
				ch.Stop(ctx)
				t.Fatal("Start succeeded with a rejected token")
			}
			if err.Error() != c.want {
				t.Fatalf("error %q; want %q", err, c.want)
			}
		})
	}
}

func TestEventsMode(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, func(c *Config) { c.Mode, c.SigningSecret, c.AppToken = ModeEvents, slacktest.SigningSecret, "" })
	ctx := context.Background()

	t.Run("bad signature", func(t *testing.T) {
		body := []byte(`{"type":"url_verification","challenge":"c1"}`)
		for name, h := range map[string]http.Header{
			"unsigned":     {"Content-Type": {"application/json"}},
			"wrong secret": slacktest.Sign("not-the-secret", body, time.Now()),
			"stale":        slacktest.Sign(slacktest.SigningSecret, body, time.Now().Add(-10*time.Minute)),
		} {
			status, _, err := slacktest.Post(ctx, st.eventsURL, body, h)
			if err != nil || status != http.StatusUnauthorized {
				t.Errorf("%s: status %d, err %v; want 401", name, status, err)
			}
		}
	})
	t.Run("url_verification", func(t *testing.T) {
		body := []byte(`{"token":"x","type":"url_verification","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}`)
		status, resp, err := slacktest.Post(ctx, st.eventsURL, body, slacktest.Sign(slacktest.SigningSecret, body, time.Now()))
		if err != nil || status != http.StatusOK || !strings.Contains(resp, "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P") {
			t.Fatalf("status %d body %q err %v; want the challenge back", status, resp, err)
		}
	})
	t.Run("oversized body", func(t *testing.T) {
		body := bytes.Repeat([]byte("x"), 2<<20)
		status, _, _ := slacktest.Post(ctx, st.eventsURL, body, slacktest.Sign(slacktest.SigningSecret, body, time.Now()))
		if status != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d; want 413", status)
		}
	})
	t.Run("message and retried delivery", func(t *testing.T) {
		ts := s.DM("D20", user, "over http")
		m := st.sink.Next(t)
		if m.Text() != "over http" {
			t.Fatalf("delivered %q", m.Text())
		}
		answer(t, st.ch, channels.TargetOf(m), channels.Frame{Type: channels.FrameDone, Text: "answered"})
		s.Redeliver("D20", ts) // Slack retries: X-Slack-Retry-Num 1
		eventually(t, "the retry to be answered", func() bool {
			for _, d := range s.Deliveries() {
				if d.RetryNum == 1 && d.Status == http.StatusOK {
					return true
				}
			}
			return false
		})
		st.sink.ExpectNone(t, 300*time.Millisecond)
		if p := s.Posted("D20"); len(p) != 1 {
			t.Fatalf("posted %+v; want one answer", p)
		}
	})
	t.Run("slow answer retried while in flight", func(t *testing.T) {
		s.SetHTTPTimeout(300 * time.Millisecond)
		st.sink.mu.Lock()
		st.sink.delay = 700 * time.Millisecond
		st.sink.mu.Unlock()
		s.DM("D21", user, "slow one")
		if m := st.sink.Next(t); m.Text() != "slow one" {
			t.Fatalf("delivered %q", m.Text())
		}
		eventually(t, "Slack to get a 200", func() bool {
			ds := s.Deliveries()
			return ds[len(ds)-1].Status == http.StatusOK && ds[len(ds)-1].RetryNum > 0
		})
		st.sink.ExpectNone(t, 500*time.Millisecond)
	})
	t.Run("refused delivery is retried by Slack", func(t *testing.T) {
		s.SetHTTPTimeout(3 * time.Second)
		st.sink.mu.Lock()
		st.sink.failNext = 1
		st.sink.mu.Unlock()
		s.DM("D22", user, "second time lucky")
		if m := st.sink.Next(t); m.Text() != "second time lucky" {
			t.Fatalf("delivered %q", m.Text())
		}
		var statuses []int
		for _, d := range s.Deliveries() {
			statuses = append(statuses, d.Status)
		}
		if !slices.Contains(statuses, http.StatusServiceUnavailable) {
			t.Fatalf("statuses %v; want the refused delivery answered with an error", statuses)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Enabled: true, BotToken: "xoxb-1", AppToken: "xapp-1"}
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string // "" = valid
	}{
		{"socket ok", func(*Config) {}, ""},
		{"disabled is not checked", func(c *Config) { c.Enabled, c.BotToken = false, "" }, ""},
		{"no bot token", func(c *Config) { c.BotToken = "" }, "channels.slack.bot_token"},
		{"user token", func(c *Config) { c.BotToken = "xoxp-1" }, "channels.slack.bot_token"},
		{"socket needs app token", func(c *Config) { c.AppToken = "" }, "channels.slack.app_token"},
		{"events needs signing secret", func(c *Config) { c.Mode, c.AppToken = ModeEvents, "" }, "channels.slack.signing_secret"},
		{"events ok", func(c *Config) { c.Mode, c.AppToken, c.SigningSecret = ModeEvents, "", "s" }, ""},
		{"bad mode", func(c *Config) { c.Mode = "rtm" }, "channels.slack.mode"},
		{"api_url without slash", func(c *Config) { c.APIURL = "http://127.0.0.1:1/api" }, "channels.slack.api_url"},
		{"api_url not a URL", func(c *Config) { c.APIURL = "slack/" }, "channels.slack.api_url"},
		{"negative max_file_bytes", func(c *Config) { c.MaxFileBytes = -1 }, "channels.slack.max_file_bytes"},
		{"bad dm_policy", func(c *Config) { c.DMPolicy = "closed" }, "channels.slack.dm_policy"},
		{"allow_from ids", func(c *Config) { c.AllowFrom = []string{"U0123ABCD", "W0123ABCD", "U1"} }, ""},
		{"allow_from a name", func(c *Config) { c.AllowFrom = []string{"U0123ABCD", "@alice"} }, "channels.slack.allow_from[1]"},
		{"allow_from lower case", func(c *Config) { c.AllowFrom = []string{"u0123abcd"} }, "Copy member ID"},
		{"allow_from a channel", func(c *Config) { c.AllowFrom = []string{"U0123ABCD", "C0123ABCD"} }, "channels.slack.allow_from[1]: \"C0123ABCD\" is not a user id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok
			c.mutate(&cfg)
			err := cfg.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v; want one naming %s", err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), "xoxb-1") {
				t.Fatalf("the token leaked into %q", err)
			}
		})
	}
	if _, err := New(Config{BotToken: "xoxb-1"}, Options{}); err == nil || !strings.Contains(err.Error(), "app_token") {
		t.Fatalf("New accepted an invalid config: %v", err)
	}
}

func TestRateLimitedEditPostponesWithoutLosingText(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	ctx := context.Background()
	s.AddChannel("D30")
	stream, err := st.ch.Open(ctx, channels.Target{Channel: Name, ChatID: "D30", ChatType: channels.ChatDM})
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(ctx, channels.Frame{Type: channels.FrameDelta, Text: "first "}); err != nil {
		t.Fatal(err)
	}
	const wait = 2 * time.Second
	s.FailNext(1, fakeserver.Failure{RetryAfter: wait})
	time.Sleep(editInterval + 100*time.Millisecond)
	if err := stream.Send(ctx, channels.Frame{Type: channels.FrameDelta, Text: "second"}); err != nil {
		t.Fatalf("an intermediate edit that hit the rate limit failed the frame: %v", err)
	}
	limited := s.Calls("chat.update")
	if len(limited) != 1 || limited[0].Status != http.StatusTooManyRequests {
		t.Fatalf("chat.update calls %+v; want the one that got 429", limited)
	}
	if err := stream.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "first second"}); err != nil {
		t.Fatal(err)
	}
	p := s.Posted("D30")
	if len(p) != 1 || p[0].Text != "first second" {
		t.Fatalf("posted %+v; want the whole answer in one message", p)
	}
	calls := s.Calls("chat.update")
	last := calls[len(calls)-1]
	if last.Status != http.StatusOK || last.Time.Sub(limited[0].Time) < wait {
		t.Fatalf("final edit at +%v after the 429; Retry-After was %v", last.Time.Sub(limited[0].Time), wait)
	}
}

func TestLifecycle(t *testing.T) {
	s := slacktest.New(t)
	ch, err := New(fakeConfig(s), Options{Logger: testLogger(t), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sink := newRecSink()
	if err := ch.Start(ctx, sink); err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(ctx, sink); err == nil {
		t.Fatal("a second Start succeeded")
	}
	if err := ch.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ch.Stop(ctx); err != nil {
		t.Fatalf("a second Stop: %v", err)
	}
	if r := sink.reports(); !slices.Equal(r, []bool{true, false}) {
		t.Fatalf("connection reports %v; want up then down", r)
	}
	if _, err := ch.Open(ctx, channels.Target{Channel: Name, ChatID: "D1"}); err == nil {
		t.Fatal("Open after Stop succeeded")
	}
	// Messages sent while the adapter is down wait for the next one.
	s.DM("D1", user, "while away")
	st := start(t, s, nil)
	if m := st.sink.Next(t); m.Text() != "while away" {
		t.Fatalf("delivered %q", m.Text())
	}
}

// An answer resumed after a crash (Target.Resume) replaces the parts its cut attempt had
// sent, a note and a voice note: the chat shows each once, not the cut attempt's beside the
// new ones; with no parts of its own it removes them at its end. One deleted meanwhile is
// no failure.
func TestResumedAnswerReplacesTheCutAttemptsParts(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	const chat = "D40"
	s.AddChannel(chat)
	var placed []string
	target := channels.Target{Channel: "slack", ChatID: chat, ChatType: channels.ChatDM,
		Placed: func(p string) { placed = append(placed, p) }}
	voice := channels.Part{Type: channels.PartAudio, Voice: true, MIME: "audio/ogg", Data: randomBytes(t, 1500)}
	parts := channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartText, Text: "a note"}, voice}}
	shows := func() []string {
		var out []string
		for _, m := range s.Posted(chat) {
			item := m.Text
			for _, f := range m.Files {
				item = "file " + f.Title
			}
			out = append(out, item)
		}
		return out
	}

	// The cut attempt: the answer and its parts, then nothing (the crash).
	answer(t, st.ch, target, channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDelta, Text: "the cut answer"}, parts)
	if got := shows(); !slices.Equal(got, []string{"the cut answer", "a note", "file Voice message"}) {
		t.Fatalf("the cut attempt shows %q", got)
	}

	target.Resume = placed[len(placed)-1]
	answer(t, st.ch, target, channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDelta, Text: "the answer"}, parts,
		channels.Frame{Type: channels.FrameDone, Text: "the answer"})
	if got := shows(); !slices.Equal(got, []string{"the answer", "a note", "file Voice message"}) {
		t.Fatalf("the resumed answer shows %q; want the answer, the note and the voice note once each", got)
	}
	if n := len(s.Calls("files.delete")); n != 1 {
		t.Errorf("files.delete called %d times; want once, for the cut attempt's voice note", n)
	}

	// Again, the voice note deleted meanwhile, and an answer without parts this time.
	target.Resume = placed[len(placed)-1]
	for _, m := range s.Posted(chat) {
		if len(m.Files) > 0 {
			if err := slackgo.New(slacktest.BotToken, slackgo.OptionAPIURL(s.APIURL())).DeleteFileContext(context.Background(), m.Files[0].ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	answer(t, st.ch, target, channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDone, Text: "the last answer"})
	if got := shows(); !slices.Equal(got, []string{"the last answer"}) {
		t.Fatalf("the resumed answer without parts shows %q; want the answer alone", got)
	}
	if p := placed[len(placed)-1]; strings.Contains(p, ";") {
		t.Errorf("the last placement %q still names parts", p)
	}
}

// Telling a stranger that they are not allowed is a post like any other, and may wait on
// a rate limit: meanwhile the messages of other chats are taken at once.
func TestStrangersNoticeHoldsUpNoOtherChat(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	s.FailNext(1, fakeserver.Failure{Method: "chat.postMessage", RetryAfter: 5 * time.Second})
	s.DM("D12", "U666", "stranger in a DM")
	s.DM("D11", user, "a person")
	if m := st.sink.Next(t); m.Text() != "a person" {
		t.Fatalf("delivered %q", m.Text())
	}
	if p := s.Posted("D12"); len(p) != 0 {
		t.Fatalf("the allowed user's message was taken only after the stranger's notice went out (%d posted)", len(p))
	}
	eventually(t, "the notice after the rate limit", func() bool { return len(s.Posted("D12")) == 1 })
}
