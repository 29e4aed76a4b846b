package telegram_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-telegram/bot/models"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/internal/fakeserver"
	"gateway/internal/secret"
	"gateway/state"
)

// funcSink is a channeltest.Sink whose Deliver can be replaced.
type funcSink struct {
	*channeltest.Sink
	deliver func(ctx context.Context, m *channels.Message) error
}

func (s funcSink) Deliver(ctx context.Context, m *channels.Message) error { return s.deliver(ctx, m) }

type fixture struct {
	t    *testing.T
	srv  *telegramtest.Server
	logs *channeltest.LogBuffer // the channel's logs, checked for secrets
	dir  string
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, srv: telegramtest.NewServer(t), logs: &channeltest.LogBuffer{}, dir: t.TempDir()}
	t.Cleanup(func() {
		for _, s := range []string{telegramtest.Token, "hook-secret-0123456789"} {
			if strings.Contains(f.logs.String(), s) {
				t.Errorf("a secret appears in the logs")
			}
		}
	})
	return f
}

// chats makes ids chats the bot may post in before anyone wrote there: the fake, like
// Telegram, refuses a send to a chat no user started and the bot is not in.
func (f *fixture) chats(ids ...int64) {
	for _, id := range ids {
		f.srv.AddChat(id)
	}
}

func (f *fixture) config() telegram.Config {
	return telegram.Config{Enabled: true, Token: secret.Secret(telegramtest.Token), APIURL: f.srv.URL,
		Access: channels.Access{AllowFrom: []string{strconv.Itoa(telegramtest.UserID)}, DMPolicy: channels.DMAllowlist, RequireMention: true}}
}

func (f *fixture) options() telegram.Options {
	return telegram.Options{Logger: f.logs.Logger(), StateDir: f.dir, PollTimeout: 5 * time.Second,
		Pacing: telegram.Pacing{GlobalPerSecond: -1, PerChatInterval: -1, GroupInterval: -1}}
}

// start builds and starts a channel; it is stopped when the test ends.
func (f *fixture) start(cfg telegram.Config, opts telegram.Options, sink channels.Sink) *telegram.Channel {
	f.t.Helper()
	ch, err := telegram.New(cfg, opts)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.run(ch, sink)
}

func (f *fixture) run(ch *telegram.Channel, sink channels.Sink) *telegram.Channel {
	f.t.Helper()
	channeltest.Start(f.t, ch, sink)
	return ch
}

// answer writes frames to target.
func answer(t *testing.T, ch channels.Channel, target channels.Target, frames ...channels.Frame) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := ch.Open(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	for _, fr := range frames {
		if err := st.Send(ctx, fr); err != nil {
			t.Fatalf("Send %s: %v", fr.Type, err)
		}
	}
}

func done(text string) channels.Frame { return channels.Frame{Type: channels.FrameDone, Text: text} }

func stop(t *testing.T, ch channels.Channel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ch.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a bound only: the whole suite on two busy cores
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRestartNeitherLosesNorRepeats(t *testing.T) {
	f := newFixture(t)
	// As if every process died before its confirming getUpdates reached Telegram:
	// only the saved offset stands between a restart and a repeat.
	f.srv.HoldConfirm(true)

	// A gateway that takes nothing: the update must survive the restart.
	refusing := funcSink{Sink: channeltest.NewSink(), deliver: func(context.Context, *channels.Message) error { return channels.ErrNotAccepted }}
	ch1 := f.start(f.config(), f.options(), refusing)
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "first"})
	eventually(t, "the refused delivery", func() bool { return len(f.srv.Calls("getUpdates")) >= 2 })
	stop(t, ch1)

	sink2 := channeltest.NewSink()
	ch2 := f.start(f.config(), f.options(), sink2)
	if m := sink2.Next(t); m.Text() != "first" {
		t.Fatalf("after a refused delivery and a restart got %q; want the update again", m.Text())
	}
	stop(t, ch2)

	sink3 := channeltest.NewSink()
	f.start(f.config(), f.options(), sink3)
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "second"})
	if m := sink3.Next(t); m.Text() != "second" {
		t.Fatalf("after a restart with the same state_dir got %q; want only the new message", m.Text())
	}
	sink3.ExpectNone(t, 300*time.Millisecond)

	// Control: without the saved offset, Telegram would hand the same updates over again.
	other := f.options()
	other.StateDir = t.TempDir()
	sink4 := channeltest.NewSink()
	f.start(f.config(), other, sink4)
	if m := sink4.Next(t); m.Text() != "first" {
		t.Fatalf("control: a fresh state_dir got %q; the fake should have repeated the held updates", m.Text())
	}
}

func TestWebhook(t *testing.T) {
	f := newFixture(t)
	mux := http.NewServeMux()
	hs := httptest.NewServer(mux)
	defer hs.Close()
	cfg := f.config()
	cfg.Mode, cfg.WebhookSecret, cfg.WebhookURL = telegram.ModeWebhook, "hook-secret-0123456789", hs.URL+telegram.WebhookPath
	var fails atomic.Int32
	fails.Store(2)
	base := channeltest.NewSink()
	flaky := funcSink{Sink: base, deliver: func(ctx context.Context, m *channels.Message) error {
		if m.Text() == "flaky" && fails.Add(-1) >= 0 {
			return channels.ErrNotAccepted
		}
		return base.Deliver(ctx, m)
	}}
	ch, err := telegram.New(cfg, f.options())
	if err != nil {
		t.Fatal(err)
	}
	ch.Routes(mux)
	f.run(ch, flaky)
	if u, s := f.srv.Webhook(); u != cfg.WebhookURL || s != "hook-secret-0123456789" {
		t.Fatalf("setWebhook registered %q with secret %q", u, s)
	}

	post := func(secret string, body string) int {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+telegram.WebhookPath, strings.NewReader(body))
		if secret != "" {
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	forged := `{"update_id":1,"message":{"message_id":1,"date":1,"chat":{"id":1001,"type":"private"},"from":{"id":1001,"first_name":"A"},"text":"forged"}}`
	if code := post("wrong", forged); code != http.StatusUnauthorized {
		t.Errorf("wrong secret answered %d; want 401", code)
	}
	if code := post("", forged); code != http.StatusUnauthorized {
		t.Errorf("missing secret answered %d; want 401", code)
	}
	big := `{"update_id":2,"message":{"text":"` + strings.Repeat("x", 2<<20) + `"}}`
	if code := post("hook-secret-0123456789", big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 2 MB body answered %d; want 413", code)
	}
	base.ExpectNone(t, 200*time.Millisecond)

	id, _ := f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "via webhook"})
	if m := base.Next(t); m.Text() != "via webhook" {
		t.Fatalf("delivered %q", m.Text())
	}
	f.srv.Redeliver(id)
	eventually(t, "the redelivery to be answered", func() bool { return f.srv.Pending() == 0 })
	base.ExpectNone(t, 300*time.Millisecond)

	// An update the adapter cannot read is acknowledged and skipped: refused, Telegram
	// would post it again and again, the chat's next updates behind it.
	f.srv.SendMessageJSON(unreadableMessage)
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "after the unreadable one"})
	if m := base.Next(t); m.Text() != "after the unreadable one" {
		t.Fatalf("delivered %q", m.Text())
	}
	eventually(t, "the unreadable update to be acknowledged", func() bool { return f.srv.Pending() == 0 })

	// The gateway refuses twice: the webhook answers 5xx, Telegram sends again, delivered once.
	tries := f.srv.WebhookTries()
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "flaky"})
	if m := base.Next(t); m.Text() != "flaky" {
		t.Fatalf("delivered %q", m.Text())
	}
	// (The count moves once the fake has read the 200, just after the delivery.)
	eventually(t, "three webhook posts of the refused update", func() bool { return f.srv.WebhookTries()-tries >= 3 })
	base.ExpectNone(t, 300*time.Millisecond)
	if got := f.srv.Calls("getUpdates"); len(got) != 0 {
		t.Errorf("webhook mode called getUpdates %d times", len(got))
	}
}

// unreadableMessage is a message no version of the Bot API sends (a message_id that is
// not a number): what the adapter cannot decode.
const unreadableMessage = `{"message_id":"abc","date":1,"chat":{"id":1001,"type":"private"},"text":"unreadable"}`

// An update the adapter cannot read is skipped, alone: decoded with its batch, it failed
// every getUpdates, the offset never moved, and no chat was answered again.
func TestAnUnreadableUpdateIsSkippedAlone(t *testing.T) {
	f := newFixture(t)
	sink := channeltest.NewSink()
	f.start(f.config(), f.options(), sink)
	f.srv.SendMessageJSON(unreadableMessage)
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "after the unreadable one"})
	f.srv.Send(telegramtest.Update{ChatID: 1002, Text: "another chat"})
	got := map[string]bool{}
	for range 2 {
		got[sink.Next(t).Text()] = true
	}
	if !got["after the unreadable one"] || !got["another chat"] {
		t.Fatalf("delivered %v; want both updates that came after the unreadable one", got)
	}
	eventually(t, "the offset to move past every update", func() bool { return f.srv.Pending() == 0 })
	sink.ExpectNone(t, 200*time.Millisecond)
}

func TestOversizedVoiceIsRefusedInChat(t *testing.T) {
	f := newFixture(t)
	sink := channeltest.NewSink()
	f.start(f.config(), f.options(), sink)
	f.srv.Send(telegramtest.Update{ChatID: 1001, Voice: []byte("OggS tiny"), FileSize: 31 << 20})
	eventually(t, "the refusal", func() bool { return len(f.srv.Messages(1001)) > 0 })
	got := f.srv.Messages(1001)[0].Text
	if got != "Sorry, that voice note is too large for me (31 MB; I can take up to 20 MB), so I haven't heard it." {
		t.Errorf("refusal = %q", got)
	}
	sink.ExpectNone(t, 300*time.Millisecond)
	if n := len(f.srv.Calls("file")); n != 0 {
		t.Errorf("the oversized file was downloaded (%d downloads)", n)
	}

	// A smaller max_file_bytes applies too, and the next message still goes through.
	cfg := f.config()
	cfg.MaxFileBytes = 1000
	f2 := newFixture(t)
	cfg.APIURL = f2.srv.URL
	sink2 := channeltest.NewSink()
	f2.start(cfg, f2.options(), sink2)
	f2.srv.Send(telegramtest.Update{ChatID: 1001, Audio: bytes.Repeat([]byte("a"), 5000), AudioName: "song.mp3"})
	f2.srv.Send(telegramtest.Update{ChatID: 1001, Text: "after"})
	if m := sink2.Next(t); m.Text() != "after" {
		t.Fatalf("delivered %q; want only the text after the refused audio", m.Text())
	}
	if msgs := f2.srv.Messages(1001); len(msgs) != 1 || msgs[0].Text != "Sorry, that audio file is too large for me (5 KB; I can take up to 1000 bytes), so I haven't heard it." {
		t.Errorf("bot posted %+v", msgs)
	}
}

func TestPhotoDocumentAndOtherParts(t *testing.T) {
	f := newFixture(t)
	sink := channeltest.NewSink()
	f.start(f.config(), f.options(), sink)
	photo := bytes.Repeat([]byte{0xff, 0xd8, 1, 2}, 500)
	f.srv.Send(telegramtest.Update{ChatID: 1001, Photo: photo, Caption: "what is this?"})
	m := sink.Next(t)
	if m.Text() != "what is this?" {
		t.Errorf("caption = %q", m.Text())
	}
	var img *channels.Part
	for i := range m.Parts {
		if m.Parts[i].Type == channels.PartImage {
			img = &m.Parts[i]
		}
	}
	if img == nil || img.MIME != "image/jpeg" || !bytes.Equal(channeltest.PartBytes(t, *img), photo) {
		t.Fatalf("parts = %+v; want the full-size photo as an image part", m.Parts)
	}
	if !strings.HasPrefix(img.Path, f.dir) {
		t.Errorf("photo saved at %q, outside state_dir %q", img.Path, f.dir)
	}

	doc := []byte("%PDF-1.4 a tiny report")
	f.srv.Send(telegramtest.Update{ChatID: 1001, Document: doc, DocumentName: "report.pdf", DocumentMIME: "application/pdf"})
	m = sink.Next(t)
	if len(m.Parts) != 1 || m.Parts[0].Type != channels.PartFile || m.Parts[0].Name != "report.pdf" ||
		m.Parts[0].MIME != "application/pdf" || !bytes.Equal(channeltest.PartBytes(t, m.Parts[0]), doc) {
		t.Fatalf("document parts = %+v", m.Parts)
	}

	f.srv.SendRaw(models.Update{Message: &models.Message{ID: 9001, Date: 1, Chat: models.Chat{ID: 1001, Type: models.ChatTypePrivate},
		From: &models.User{ID: telegramtest.UserID, FirstName: "A"}, Sticker: &models.Sticker{FileID: "s", Emoji: "👍", IsAnimated: true}}}) // a static one is an image (gateway tests)
	if m := sink.Next(t); !strings.Contains(m.Text(), "sticker 👍") {
		t.Errorf("a sticker arrived as %q; the agent should be told what it was", m.Text())
	}
}

func TestMarkdownAsHTMLWithPlainFallback(t *testing.T) {
	f := newFixture(t)
	f.chats(1001)
	ch := f.start(f.config(), f.options(), channeltest.NewSink())
	target := channels.Target{Channel: "telegram", ChatID: "1001", ChatType: channels.ChatDM}
	answer(t, ch, target, done("**Bold** claim: 2 < 3 & `x>y`"))
	msgs := f.srv.Messages(1001)
	if len(msgs) != 1 || msgs[0].ParseMode != "HTML" || msgs[0].Raw != "<b>Bold</b> claim: 2 &lt; 3 &amp; <code>x&gt;y</code>" {
		t.Fatalf("posted %+v; want the markdown rendered as Telegram HTML", msgs)
	}
	if msgs[0].Text != "Bold claim: 2 < 3 & x>y" {
		t.Errorf("a user sees %q", msgs[0].Text)
	}

	f.srv.RejectHTML(1)
	answer(t, ch, target, done("**Second** answer"))
	msgs = f.srv.Messages(1001)
	if len(msgs) != 2 || msgs[1].ParseMode != "" || msgs[1].Text != "Second answer" {
		t.Fatalf("after Telegram refused the HTML, posted %+v; want the same text, plain", msgs[len(msgs)-1])
	}
}

// When Telegram refuses the HTML of an answer, the plain text sent instead reads as the
// HTML would have: entities the rendering made are characters again, what the model wrote
// shows as it would have in HTML (its own "&amp;" included), and a link keeps its address
// after its label, since plain text cannot hide it behind the label. This holds for a new
// message (after the preview's and the answer's HTML were both refused) and for an edit.
func TestPlainFallbackKeepsLinksAndShowsWhatHTMLWould(t *testing.T) {
	f := newFixture(t)
	f.chats(1001)
	opts := f.options()
	opts.EditInterval = 10 * time.Millisecond
	ch := f.start(f.config(), opts, channeltest.NewSink())
	target := channels.Target{Channel: "telegram", ChatID: "1001", ChatType: channels.ChatDM}
	cases := []struct{ md, html, plain string }{
		{`click [ok](https://example.com/a?b=1&c="2")`, "click ok", `click ok (https://example.com/a?b=1&c="2")`},
		{"Tom &amp; Jerry & co: 2 < 3, `x>y` and <b>raw</b>", "Tom &amp; Jerry & co: 2 < 3, x>y and <b>raw</b>",
			"Tom &amp; Jerry & co: 2 < 3, x>y and <b>raw</b>"},
		{"see <https://example.com/q?a=1&b=2> or [mail](mailto:a@example.com)", "see https://example.com/q?a=1&b=2 or mail",
			"see https://example.com/q?a=1&b=2 or mail (mailto:a@example.com)"},
	}
	for _, tc := range cases {
		before := len(f.srv.Messages(1001))
		answer(t, ch, target, done(tc.md))
		if msgs := f.srv.Messages(1001)[before:]; len(msgs) != 1 || msgs[0].ParseMode != "HTML" || msgs[0].Text != tc.html {
			t.Fatalf("%q as HTML: posted %+v; want a user to see %q", tc.md, msgs, tc.html)
		}
		f.srv.RejectHTML(2) // the preview's and the answer's
		answer(t, ch, target, channels.Frame{Type: channels.FrameDelta, Text: tc.md}, done(""))
		if msgs := f.srv.Messages(1001)[before+1:]; len(msgs) != 1 || msgs[0].ParseMode != "" || msgs[0].Text != tc.plain {
			t.Errorf("%q after the HTML was refused: posted %+v; want %q, plain", tc.md, msgs, tc.plain)
		}
	}

	// The preview went out as HTML; the final edit's HTML is refused.
	st, err := ch.Open(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	before := len(f.srv.Messages(1001))
	if err := st.Send(context.Background(), channels.Frame{Type: channels.FrameDelta, Text: "Here: "}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the preview", func() bool { return len(f.srv.Messages(1001)) > before })
	f.srv.RejectHTML(1)
	if err := st.Send(context.Background(), done("Here: [the report](https://example.com/r?id=7&x=1) &amp; more")); err != nil {
		t.Fatal(err)
	}
	want := "Here: the report (https://example.com/r?id=7&x=1) &amp; more"
	if msgs := f.srv.Messages(1001)[before:]; len(msgs) != 1 || msgs[0].ParseMode != "" || msgs[0].Text != want {
		t.Errorf("after the edit's HTML was refused the chat shows %+v; want %q, plain", msgs, want)
	}
}

func TestBadTokenStartError(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.Token = badToken
	ch, err := telegram.New(cfg, f.options())
	if err != nil {
		t.Fatal(err)
	}
	err = ch.Start(context.Background(), channeltest.NewSink())
	if err == nil {
		t.Fatal("Start succeeded with a rejected token")
	}
	if want := "telegram: the bot token was rejected (401 Unauthorized); check channels.telegram.token"; err.Error() != want {
		t.Errorf("Start error = %q; want %q", err, want)
	}
	if strings.Contains(f.logs.String(), badToken) {
		t.Errorf("the token appears in the logs")
	}
}

// A start sets the command menu once, with the gateway's list: the gateway calls
// SetCommands once the channel started, and Start itself sets none (it used to set a
// built-in list first, a second setMyCommands on every start). Polling deletes a webhook
// left set.
func TestStartSetsTheMenuOnceAndDeletesWebhook(t *testing.T) {
	f := newFixture(t)
	ch := f.start(f.config(), f.options(), channeltest.NewSink())
	// What the gateway does after every channel's Start (gateway/commands.go, pushCommands).
	menu := []channels.Command{{Name: "new", Description: "Start a new conversation"}, {Name: "stop", Description: "Stop the answer"},
		{Name: "help", Description: "This list"}, {Name: "pop", Description: "Go back to an earlier turn"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ch.SetCommands(ctx, menu); err != nil {
		t.Fatal(err)
	}
	if n := len(f.srv.Calls("setMyCommands")); n != 1 {
		t.Errorf("a start called setMyCommands %d times; want once, with the gateway's menu", n)
	}
	var names []string
	for _, c := range f.srv.Commands() {
		names = append(names, c.Command)
	}
	if !slices.Equal(names, []string{"new", "stop", "help", "pop"}) {
		t.Errorf("the menu shows %v; want the gateway's", names)
	}
	if len(f.srv.Calls("deleteWebhook")) != 1 {
		t.Errorf("polling did not call deleteWebhook first")
	}
}

func TestWatchdogRestartsStuckPolling(t *testing.T) {
	f := newFixture(t)
	var calls atomic.Int32
	base := channeltest.NewSink()
	stuck := funcSink{Sink: base, deliver: func(ctx context.Context, m *channels.Message) error {
		if calls.Add(1) == 1 {
			<-ctx.Done() // the gateway hangs on the first message
			return ctx.Err()
		}
		return base.Deliver(ctx, m)
	}}
	opts := f.options()
	opts.Watchdog = 500 * time.Millisecond
	f.start(f.config(), opts, stuck)
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "are you there?"})
	if m := base.Next(t); m.Text() != "are you there?" {
		t.Fatalf("delivered %q", m.Text())
	}
	if !strings.Contains(f.logs.String(), "restarting") {
		t.Errorf("the watchdog's restart was not logged")
	}
	base.ExpectNone(t, 300*time.Millisecond)
}

func TestGroupAnswersQuoteAndStayInTopic(t *testing.T) {
	f := newFixture(t)
	sink := channeltest.NewSink()
	ch := f.start(f.config(), f.options(), sink)
	_, id := f.srv.Send(telegramtest.Update{ChatID: -100, ThreadID: 42, Mention: true, Text: "hi"})
	m := sink.Next(t)
	if m.ThreadID != "42" || m.ChatType != channels.ChatGroup || !m.Mentioned || m.Text() != "hi" || m.ReplyTo != nil {
		t.Fatalf("normalised %+v; want topic 42, group, mentioned, text without @bot, no reply (the topic root is not one)", m)
	}
	answer(t, ch, channels.TargetOf(m), channels.Frame{Type: channels.FrameStart}, done("hello group"))
	msgs := f.srv.Messages(-100)
	if len(msgs) != 1 || msgs[0].ReplyTo != id || msgs[0].ThreadID != 42 {
		t.Fatalf("posted %+v; want a reply to %d in topic 42", msgs, id)
	}
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "dm"})
	m = sink.Next(t)
	answer(t, ch, channels.TargetOf(m), done("dm answer"))
	if msgs := f.srv.Messages(1001); len(msgs) != 1 || msgs[0].ReplyTo != 0 {
		t.Errorf("a DM answer quoted the user: %+v", msgs)
	}
}

func TestInboundNormalisation(t *testing.T) {
	f := newFixture(t)
	f.chats(-200)
	sink := channeltest.NewSink()
	ch := f.start(f.config(), f.options(), sink)
	answer(t, ch, channels.Target{Channel: "telegram", ChatID: "-200", ChatType: channels.ChatGroup}, done("I am the bot"))
	botMsg := f.srv.BotMessage(-200, f.srv.Messages(-200)[0].ID)

	f.srv.Send(telegramtest.Update{ChatID: -200, Text: "no mention, ignored"})
	f.srv.Send(telegramtest.Update{ChatID: -200, Text: "replying to you", ReplyTo: botMsg})
	m := sink.Next(t)
	if m.Text() != "replying to you" || !m.Mentioned || m.ReplyTo == nil || !m.ReplyTo.FromBot || m.ReplyTo.Text != "I am the bot" {
		t.Fatalf("a reply to the bot normalised as %+v (reply %+v)", m, m.ReplyTo)
	}
	f.srv.Send(telegramtest.Update{ChatID: -200, Text: "/status@other_bot"})
	f.srv.Send(telegramtest.Update{ChatID: -200, Text: "/new@" + telegramtest.BotUsername})
	if m := sink.Next(t); m.Text() != "/new" || !m.Mentioned {
		t.Fatalf("a command to the bot arrived as %q (mentioned %v); want /new", m.Text(), m.Mentioned)
	}
	f.srv.Send(telegramtest.Update{ChatID: 1001, From: &models.User{ID: 555, IsBot: true, FirstName: "Other"}, Text: "bot chatter"})
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "line one\nline two"})
	if m := sink.Next(t); m.Text() != "line one\nline two" || m.ChatType != channels.ChatDM || m.UserName != "alice" {
		t.Fatalf("a DM arrived as %+v", m)
	}
	sink.ExpectNone(t, 200*time.Millisecond)
}

func TestStrangerIsToldOnce(t *testing.T) {
	f := newFixture(t)
	sink := channeltest.NewSink()
	f.start(f.config(), f.options(), sink)
	stranger := &models.User{ID: 666, FirstName: "Eve"}
	for range 3 {
		f.srv.Send(telegramtest.Update{ChatID: 666, From: stranger, Text: "let me in"})
	}
	f.srv.Send(telegramtest.Update{ChatID: -300, From: stranger, Mention: true, Text: "in a group"})
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "marker"})
	if m := sink.Next(t); m.Text() != "marker" {
		t.Fatalf("delivered %q from %s", m.Text(), m.UserID)
	}
	eventually(t, "the notice", func() bool { return len(f.srv.Messages(666)) > 0 })
	time.Sleep(200 * time.Millisecond)
	msgs := f.srv.Messages(666)
	if len(msgs) != 1 || msgs[0].Text != channels.NotAllowedText("666") {
		t.Errorf("the stranger got %+v; want the not-allowed notice once", msgs)
	}
	if n := len(f.srv.Messages(-300)); n != 0 {
		t.Errorf("the bot answered a stranger in a group (%d messages)", n)
	}
}

// The not-allowed notice, once an hour per stranger, was forgotten on restart: a gateway
// restarting in a loop told a stranger again each time. Whom it told is now kept in the
// state, so a stranger writing after a restart within the hour is not told again, while
// one not told yet still is.
func TestStrangerIsNotToldAgainAfterARestart(t *testing.T) {
	f := newFixture(t)
	db, err := state.Open(filepath.Join(f.dir, "state"), state.Limits{}, f.logs.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	opts := f.options()
	opts.State = db
	eve := &models.User{ID: 666, FirstName: "Eve"}
	mallory := &models.User{ID: 667, FirstName: "Mallory"}

	sink := channeltest.NewSink()
	ch := f.start(f.config(), opts, sink)
	f.srv.Send(telegramtest.Update{ChatID: 666, From: eve, Text: "let me in"})
	eventually(t, "the notice", func() bool { return len(f.srv.Messages(666)) > 0 })
	stop(t, ch)

	sink = channeltest.NewSink()
	f.start(f.config(), opts, sink)
	f.srv.Send(telegramtest.Update{ChatID: 666, From: eve, Text: "let me in, again"})
	f.srv.Send(telegramtest.Update{ChatID: 667, From: mallory, Text: "me too"})
	eventually(t, "the notice to the stranger not told yet", func() bool { return len(f.srv.Messages(667)) > 0 })
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "marker"})
	if m := sink.Next(t); m.Text() != "marker" {
		t.Fatalf("delivered %q from %s", m.Text(), m.UserID)
	}
	time.Sleep(200 * time.Millisecond)
	if msgs := f.srv.Messages(666); len(msgs) != 1 {
		t.Errorf("the stranger was told %d times across the restart; want once", len(msgs))
	}
}

func TestTypingRefreshesUntilDone(t *testing.T) {
	f := newFixture(t)
	f.chats(1001)
	opts := f.options()
	opts.TypingInterval = 100 * time.Millisecond
	ch := f.start(f.config(), opts, channeltest.NewSink())
	ctx := context.Background()
	st, err := ch.Open(ctx, channels.Target{Channel: "telegram", ChatID: "1001", ChatType: channels.ChatDM})
	if err != nil {
		t.Fatal(err)
	}
	st.Send(ctx, channels.Frame{Type: channels.FrameStart})
	time.Sleep(550 * time.Millisecond)
	if err := st.Send(ctx, done("finished")); err != nil {
		t.Fatal(err)
	}
	n := f.srv.Typing(1001)
	if n < 3 {
		t.Errorf("typing sent %d times during a 550ms turn with a 100ms refresh", n)
	}
	// A refresh the client cut at done may still be counted by the fake after done returned
	// (a busy machine schedules its handler late): one such is not the refreshes going on,
	// which would add three in 300 ms, and none may come in the 300 ms after.
	time.Sleep(300 * time.Millisecond)
	m := f.srv.Typing(1001)
	time.Sleep(300 * time.Millisecond)
	if later := f.srv.Typing(1001); m > n+1 || later != m {
		t.Errorf("typing went on after done (%d, then %d, then %d)", n, m, later)
	}
}

// An answer waiting for the model holds no goroutine for its typing indicator between
// refreshes: with many chats waiting at once, each parked goroutine kept the stack of the
// request it had sent (the gateway's memory per in-flight turn). The indicators still
// refresh, stop with their answers, and the channel's Stop ends those left open.
func TestTypingHoldsNoGoroutineWhileWaiting(t *testing.T) {
	f := newFixture(t)
	f.chats(2000)
	for i := range 30 {
		f.chats(int64(3000 + i))
	}
	opts := f.options()
	opts.TypingInterval = time.Second // refreshes come in bursts; between them the connections they opened close
	ch := f.start(f.config(), opts, channeltest.NewSink())
	ctx := context.Background()
	open := func(chat int64) channels.Stream {
		st, err := ch.Open(ctx, channels.Target{Channel: "telegram", ChatID: strconv.FormatInt(chat, 10), ChatType: channels.ChatDM})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(ctx, channels.Frame{Type: channels.FrameStart}); err != nil {
			t.Fatal(err)
		}
		return st
	}
	// One answer first, so the HTTP connections the rest reuse are open before counting.
	warm := open(2000)
	eventually(t, "the first typing action", func() bool { return f.srv.Typing(2000) > 0 })
	base := runtime.NumGoroutine()

	const chats = 30
	streams := make([]channels.Stream, chats)
	for i := range chats {
		streams[i] = open(int64(3000 + i))
	}
	eventually(t, "a refreshed typing action in every chat", func() bool {
		for i := range chats {
			if f.srv.Typing(int64(3000+i)) < 2 {
				return false
			}
		}
		return true
	})
	// Connections the burst opened beyond the idle pool close in the background; what
	// stays for good is what each waiting answer holds.
	eventually(t, "goroutines back near where they were", func() bool { return runtime.NumGoroutine() < base+chats/2 })

	for i, st := range streams[:chats/2] {
		if err := st.Send(ctx, done("answer")); err != nil {
			t.Fatal(err)
		}
		n := f.srv.Typing(int64(3000 + i))
		time.Sleep(10 * time.Millisecond)
		if m := f.srv.Typing(int64(3000 + i)); m != n {
			t.Errorf("chat %d: typing went on after done (%d -> %d)", 3000+i, n, m)
		}
	}
	// The rest, and the first, are left open: Stop ends their indicators and returns.
	_ = warm
	stop(t, ch)
	after := make([]int, chats)
	for i := range chats {
		after[i] = f.srv.Typing(int64(3000 + i))
	}
	time.Sleep(1500 * time.Millisecond) // more than a refresh interval
	for i := range chats {
		if n := f.srv.Typing(int64(3000 + i)); n != after[i] {
			t.Errorf("chat %d: typing went on after the channel stopped (%d -> %d)", 3000+i, after[i], n)
		}
	}
}

func TestPerChatOrder(t *testing.T) {
	f := newFixture(t)
	sink := channeltest.NewSink()
	f.start(f.config(), f.options(), sink)
	for i := range 10 {
		f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "a" + strconv.Itoa(i)})
		f.srv.Send(telegramtest.Update{ChatID: -400, Mention: true, Text: "b" + strconv.Itoa(i)})
	}
	next := map[string]int{}
	for range 20 {
		m := sink.Next(t)
		txt := m.Text()
		if want := txt[:1] + strconv.Itoa(next[txt[:1]]); txt != want {
			t.Fatalf("chat %s got %q; want %q (per-chat order)", m.ChatID, txt, want)
		}
		next[txt[:1]]++
	}
}

func TestPacingSpacesOneChat(t *testing.T) {
	f := newFixture(t)
	f.chats(1001, -500)
	opts := f.options()
	opts.Pacing = telegram.Pacing{PerChatInterval: 400 * time.Millisecond, GroupInterval: 800 * time.Millisecond}
	ch := f.start(f.config(), opts, channeltest.NewSink())
	for _, chat := range []string{"1001", "-500"} {
		typ := channels.ChatDM
		if chat[0] == '-' {
			typ = channels.ChatGroup
		}
		for i := range 3 {
			answer(t, ch, channels.Target{Channel: "telegram", ChatID: chat, ChatType: typ}, done("n"+strconv.Itoa(i)))
		}
	}
	for chat, gap := range map[int64]time.Duration{1001: 400 * time.Millisecond, -500: 800 * time.Millisecond} {
		msgs := f.srv.Messages(chat)
		for i := 1; i < len(msgs); i++ {
			// Arrival times carry the scheduler's jitter (a loaded CI machine under -race
			// delayed one send by 130 ms); unpaced, the messages come milliseconds apart.
			if d := msgs[i].Time.Sub(msgs[i-1].Time); d < gap/2 {
				t.Errorf("chat %d: messages %d and %d only %v apart; the pacing is %v", chat, i-1, i, d, gap)
			}
		}
	}
}

// wavBytes is one second of a 440 Hz tone as 16 kHz mono 16-bit PCM WAV.
func wavBytes() []byte {
	const rate = 16000
	var pcm bytes.Buffer
	for i := range rate {
		binary.Write(&pcm, binary.LittleEndian, int16(8000*math.Sin(2*math.Pi*440*float64(i)/rate)))
	}
	var b bytes.Buffer
	b.WriteString("RIFF")
	binary.Write(&b, binary.LittleEndian, uint32(36+pcm.Len()))
	b.WriteString("WAVEfmt ")
	for _, v := range []any{uint32(16), uint16(1), uint16(1), uint32(rate), uint32(rate * 2), uint16(2), uint16(16)} {
		binary.Write(&b, binary.LittleEndian, v)
	}
	b.WriteString("data")
	binary.Write(&b, binary.LittleEndian, uint32(pcm.Len()))
	b.Write(pcm.Bytes())
	return b.Bytes()
}

func TestVoiceOutConvertsToOggOpus(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed")
	}
	f := newFixture(t)
	f.chats(1001)
	ch := f.start(f.config(), f.options(), channeltest.NewSink())
	path := filepath.Join(t.TempDir(), "tts.wav")
	if err := os.WriteFile(path, wavBytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	answer(t, ch, channels.Target{Channel: "telegram", ChatID: "1001", ChatType: channels.ChatDM},
		channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartAudio, MIME: "audio/wav", Path: path, Voice: true, Duration: 1}}},
		done(""))
	msgs := f.srv.Messages(1001)
	if len(msgs) != 1 || msgs[0].Kind != "voice" || !msgs[0].Opus {
		t.Fatalf("posted %+v; want one native voice note in Ogg/Opus", msgs)
	}
}

// A user whose privacy settings refuse voice notes (sendVoice answers 400
// VOICE_MESSAGES_FORBIDDEN) still gets the spoken answer, as an audio file they can play,
// after its text; the answer does not fail, and the refusal is logged as expected, not as
// an error. Telegram refusing the file as well is still a failure.
func TestRefusedVoiceNoteIsSentAsAFile(t *testing.T) {
	f := newFixture(t)
	f.chats(1001)
	ch := f.start(f.config(), f.options(), channeltest.NewSink())
	voice := []byte("OggS\x00\x02 OpusHead the spoken answer")
	forbidden := fakeserver.Failure{Status: 400, Method: "sendVoice", Chat: "1001", Message: "Bad Request: VOICE_MESSAGES_FORBIDDEN"}
	f.srv.FailNext(1, forbidden)
	target := channels.Target{Channel: "telegram", ChatID: "1001", ChatType: channels.ChatDM}
	answer(t, ch, target, channels.Frame{Type: channels.FrameDelta, Text: "Here you go."},
		channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartAudio, MIME: "audio/ogg", Voice: true, Data: voice, Duration: 2}}},
		done(""))
	msgs := f.srv.Messages(1001)
	if len(msgs) != 2 || msgs[0].Text != "Here you go." || msgs[1].Kind != "document" || msgs[1].FileName != "voice.ogg" || !bytes.Equal(msgs[1].File, voice) {
		t.Fatalf("the chat shows %+v; want the text, then the voice as the file voice.ogg", msgs)
	}
	if logs := f.logs.String(); strings.Contains(logs, "level=ERROR") || strings.Contains(logs, "level=WARN") {
		t.Errorf("an expected refusal was logged as a problem:\n%s", logs)
	}

	f.srv.FailNext(1, forbidden)
	f.srv.FailNext(1, fakeserver.Failure{Status: 400, Method: "sendDocument", Chat: "1001", Message: "Bad Request: not enough rights"})
	st, err := ch.Open(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	err = st.Send(context.Background(), channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartAudio, MIME: "audio/ogg", Voice: true, Data: voice}}})
	if err == nil || !strings.Contains(err.Error(), "not enough rights") {
		t.Errorf("sending when the file was refused too: %v; want Telegram's refusal", err)
	}
}

func TestErrorFrameIsSentAsText(t *testing.T) {
	f := newFixture(t)
	f.chats(1001)
	ch := f.start(f.config(), f.options(), channeltest.NewSink())
	answer(t, ch, channels.Target{Channel: "telegram", ChatID: "1001", ChatType: channels.ChatDM},
		channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameError, Text: "The model is unavailable <try later>."})
	msgs := f.srv.Messages(1001)
	if len(msgs) != 1 || msgs[0].Text != "The model is unavailable <try later>." || msgs[0].ParseMode != "" {
		t.Fatalf("posted %+v", msgs)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := telegram.Config{Enabled: true, Token: "1:x"}
	cases := []struct {
		mut  func(*telegram.Config)
		want string
	}{
		{func(c *telegram.Config) { c.Token = "" }, "channels.telegram.token"},
		{func(c *telegram.Config) { c.Mode = "push" }, "channels.telegram.mode"},
		{func(c *telegram.Config) { c.Mode = telegram.ModeWebhook }, "channels.telegram.webhook_secret"},
		// What `openssl rand -base64 24` gives: setWebhook refuses + / =.
		{func(c *telegram.Config) { c.Mode, c.WebhookSecret = telegram.ModeWebhook, "q8T+xY/3kZ9=" }, "channels.telegram.webhook_secret: Telegram takes only"},
		{func(c *telegram.Config) {
			c.Mode, c.WebhookSecret, c.WebhookURL = telegram.ModeWebhook, "s3cret", "http://bot.example.com/telegram/webhook"
		}, "channels.telegram.webhook_url: Telegram posts updates only to an https:// URL"},
		{func(c *telegram.Config) { c.APIURL = "api.telegram.org" }, "channels.telegram.api_url"},
		{func(c *telegram.Config) { c.AllowFrom = []string{"@bob"} }, "channels.telegram.allow_from"},
		{func(c *telegram.Config) { c.AllowFrom = []string{"42", "-1001234567890"} }, "channels.telegram.allow_from[1]: \"-1001234567890\" is not a user id"},
		{func(c *telegram.Config) { c.DMPolicy = "everyone" }, "channels.telegram.dm_policy"},
		{func(c *telegram.Config) { c.MaxFileBytes = -1 }, "channels.telegram.max_file_bytes"},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if err := (telegram.Config{}).Validate(); err != nil {
		t.Errorf("a disabled channel needs nothing: %v", err)
	}
	for _, c := range cases {
		cfg := ok
		c.mut(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v; want one naming %s", err, c.want)
		}
	}
	// A local Bot API server (api_url) may post to plain HTTP; a secret of its characters passes.
	local := ok
	local.Mode, local.WebhookSecret, local.WebhookURL, local.APIURL = telegram.ModeWebhook, "hook_secret-0123", "http://10.0.0.2:8080/telegram/webhook", "http://127.0.0.1:8081"
	if err := local.Validate(); err != nil {
		t.Errorf("webhook through a local Bot API server: %v", err)
	}
	if _, err := telegram.New(ok, telegram.Options{}); err == nil || !strings.Contains(err.Error(), "state") {
		t.Errorf("New without a state dir: %v", err)
	}
}

func TestRevisedShorterAnswerRemovesStaleMessages(t *testing.T) {
	f := newFixture(t)
	f.chats(1001)
	opts := f.options()
	opts.EditInterval = 10 * time.Millisecond
	ch := f.start(f.config(), opts, channeltest.NewSink())
	ctx := context.Background()
	st, err := ch.Open(ctx, channels.Target{Channel: "telegram", ChatID: "1001", ChatType: channels.ChatDM})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("word ", 1500) // 7500 units: two messages while streaming
	for _, piece := range []string{long[:3000], long[3000:6000], long[6000:], " more"} {
		if err := st.Send(ctx, channels.Frame{Type: channels.FrameDelta, Text: piece}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	// A preview still on its way when the last piece came leaves that piece for the next
	// one, which a busy machine may not have sent yet: empty deltas give it its turn.
	for deadline := time.Now().Add(10 * time.Second); len(f.srv.Messages(1001)) < 2 && time.Now().Before(deadline); {
		if err := st.Send(ctx, channels.Frame{Type: channels.FrameDelta}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	if n := len(f.srv.Messages(1001)); n != 2 {
		t.Fatalf("streamed into %d messages; want 2", n)
	}
	if err := st.Send(ctx, done("A short revised answer.")); err != nil {
		t.Fatal(err)
	}
	msgs := f.srv.Messages(1001)
	if len(msgs) != 1 || msgs[0].Text != "A short revised answer." {
		t.Fatalf("after done the chat shows %d messages (first %.40q); want only the revised answer", len(msgs), msgs[0].Text)
	}
}

func TestUnreachableAPIErrorHasNoToken(t *testing.T) {
	f := newFixture(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	cfg := f.config()
	cfg.APIURL = url
	ch, err := telegram.New(cfg, f.options())
	if err != nil {
		t.Fatal(err)
	}
	err = ch.Start(context.Background(), channeltest.NewSink())
	if err == nil {
		t.Fatal("Start succeeded against a closed port")
	}
	t.Log(err)
	if strings.Contains(err.Error(), telegramtest.Token) || !strings.Contains(err.Error(), "telegram: cannot reach the Bot API at "+url) {
		t.Errorf("Start error = %q; want it to name the API URL and not the token", err)
	}
}

func TestVideoNoteArrivesAsSpeech(t *testing.T) {
	f := newFixture(t)
	sink := channeltest.NewSink()
	f.start(f.config(), f.options(), sink)
	clip := []byte("\x00\x00\x00\x18ftypmp42 a round video")
	f.srv.Send(telegramtest.Update{ChatID: 1001, VideoNote: clip})
	m := sink.Next(t)
	if !m.IsVoice || len(m.Parts) != 1 || m.Parts[0].Type != channels.PartAudio || m.Parts[0].MIME != "video/mp4" ||
		!bytes.Equal(channeltest.PartBytes(t, m.Parts[0]), clip) {
		t.Fatalf("video note delivered as %+v", m)
	}
}

func TestRetriesHonourRetryAfterAndBackOff(t *testing.T) {
	f := newFixture(t)
	f.chats(1001)
	ch := f.start(f.config(), f.options(), channeltest.NewSink())
	target := channels.Target{Channel: "telegram", ChatID: "1001", ChatType: channels.ChatDM}
	f.srv.FailNext(1, fakeserver.Failure{RetryAfter: time.Second})
	f.srv.FailNext(2, fakeserver.Failure{Status: http.StatusBadGateway})
	answer(t, ch, target, done("eventually"))
	calls := f.srv.Calls("sendMessage")
	var statuses []int
	for _, c := range calls {
		statuses = append(statuses, c.Status)
	}
	if !slices.Equal(statuses, []int{429, 502, 502, 200}) {
		t.Fatalf("sendMessage answered %v; want 429, 502, 502, then 200", statuses)
	}
	if d := calls[1].Time.Sub(calls[0].Time); d < time.Second {
		t.Errorf("retried %v after a 429 with retry_after 1s", d)
	}
	if msgs := f.srv.Messages(1001); len(msgs) != 1 || msgs[0].Text != "eventually" {
		t.Errorf("posted %+v", msgs)
	}
}

// An answer resumed after a crash (Target.Resume: the ids its cut attempt reported
// through Placed) is shown in those messages: a shorter answer edits the first and deletes
// the rest, a longer one edits what is there and posts the rest; Placed follows each change.
func TestResumedAnswerIsShownInTheCutAttemptsMessages(t *testing.T) {
	f := newFixture(t)
	f.chats(4250)
	ch := f.start(f.config(), f.options(), channeltest.NewSink())
	defer stop(t, ch)
	const chat = 4250
	long := strings.Repeat("word ", 2000) // three messages
	var placed []string
	target := channels.Target{Channel: "telegram", ChatID: strconv.Itoa(chat), ChatType: channels.ChatDM,
		Placed: func(p string) { placed = append(placed, p) }}
	answer(t, ch, target, channels.Frame{Type: channels.FrameStart}, done(long))
	cut := f.srv.Messages(chat)
	if len(cut) != 3 || len(placed) == 0 || placed[len(placed)-1] != fmt.Sprintf("%d,%d,%d", cut[0].ID, cut[1].ID, cut[2].ID) {
		t.Fatalf("the first attempt shows %d messages and reported %q", len(cut), placed)
	}

	placed = nil
	target.Resume = fmt.Sprintf("%d,%d,%d", cut[0].ID, cut[1].ID, cut[2].ID)
	answer(t, ch, target, channels.Frame{Type: channels.FrameStart}, done("the short answer"))
	got := f.srv.Messages(chat)
	if len(got) != 1 || got[0].ID != cut[0].ID || got[0].Text != "the short answer" {
		t.Fatalf("the shorter answer shows %+v; want it in the first message alone", got)
	}
	if want := strconv.Itoa(cut[0].ID); len(placed) == 0 || placed[len(placed)-1] != want {
		t.Fatalf("placements reported %q; want to end at %q", placed, want)
	}

	placed = nil
	target.Resume = strconv.Itoa(cut[0].ID)
	answer(t, ch, target, channels.Frame{Type: channels.FrameStart}, done(long))
	got = f.srv.Messages(chat)
	if len(got) != 3 || got[0].ID != cut[0].ID || !strings.HasPrefix(got[0].Text, "word word") {
		t.Fatalf("the longer answer shows %d messages, first %d; want the first edited and two new", len(got), got[0].ID)
	}
	if want := fmt.Sprintf("%d,%d,%d", got[0].ID, got[1].ID, got[2].ID); len(placed) == 0 || placed[len(placed)-1] != want {
		t.Fatalf("placements reported %q; want to end at %q", placed, want)
	}
}

// A text part sent with an answer (a message:send hook's, or the admin API's) is a message
// of its own: the answer's final text neither deletes it as a stale chunk nor edits it.
func TestTextPartIsAMessageOfItsOwnBesideTheAnswer(t *testing.T) {
	f := newFixture(t)
	f.chats(4260)
	ch := f.start(f.config(), f.options(), channeltest.NewSink())
	defer stop(t, ch)
	const chat = 4260
	target := channels.Target{Channel: "telegram", ChatID: strconv.Itoa(chat), ChatType: channels.ChatDM}

	// A turn: the answer streamed, a hook's text part, then done.
	answer(t, ch, target, channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDelta, Text: "the answer"},
		channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartText, Text: "a footnote"}}}, done("the answer"))
	if got := texts(f, chat); !slices.Equal(got, []string{"the answer", "a footnote"}) {
		t.Fatalf("the chat shows %q; want the answer, then the footnote", got)
	}

	// The admin API's send: parts first, then the text.
	answer(t, ch, target, channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartText, Text: "first"}}}, done("second"))
	if got := texts(f, chat); !slices.Equal(got, []string{"the answer", "a footnote", "first", "second"}) {
		t.Fatalf("the chat shows %q; want the part, then the text", got)
	}
}

// In a group with one bot, Telegram's menu sends "/stop", not "/stop@bot": a command the
// bot offers is for it without a mention, so a busy answer can be stopped; someone else's
// bare command is not.
func TestGroupBareCommandFromTheMenu(t *testing.T) {
	f := newFixture(t)
	sink := channeltest.NewSink()
	ch := f.start(f.config(), f.options(), sink)
	menu := []channels.Command{{Name: "new", Description: "Start a new conversation"}, {Name: "stop", Description: "Stop the answer"}}
	if err := ch.SetCommands(context.Background(), menu); err != nil {
		t.Fatal(err)
	}
	f.srv.Send(telegramtest.Update{ChatID: -400, Text: "/roll 2d6"})
	f.srv.Send(telegramtest.Update{ChatID: -400, ThreadID: 9, Text: "/stop"})
	m := sink.Next(t)
	if m.Text() != "/stop" || !m.Mentioned || m.ThreadID != "9" {
		t.Fatalf("delivered %q (mentioned %v, topic %q); want /stop for the bot in topic 9", m.Text(), m.Mentioned, m.ThreadID)
	}
	f.srv.Send(telegramtest.Update{ChatID: -400, Text: "/stop is what I would type"})
	if m := sink.Next(t); m.Text() != "/stop is what I would type" {
		t.Fatalf("delivered %q", m.Text())
	}
	// A reload that takes /stop out of the menu makes it someone else's again.
	if err := ch.SetCommands(context.Background(), menu[:1]); err != nil {
		t.Fatal(err)
	}
	f.srv.Send(telegramtest.Update{ChatID: -400, Text: "/stop"})
	f.srv.Send(telegramtest.Update{ChatID: -400, Text: "/new"})
	if m := sink.Next(t); m.Text() != "/new" {
		t.Fatalf("delivered %q; want /new only", m.Text())
	}
	sink.ExpectNone(t, 200*time.Millisecond)
}

// A group member whose name starts with the bot's (@gateway_test_bot_fan), or a mail
// address at a domain named like it, is not the bot: the bot stays out of that exchange.
func TestMentionOfALongerNameIsNotTheBot(t *testing.T) {
	f := newFixture(t)
	sink := channeltest.NewSink()
	f.start(f.config(), f.options(), sink)
	fan := "@" + telegramtest.BotUsername + "_fan"
	f.srv.Send(telegramtest.Update{ChatID: -410, Text: fan + " what do you think?", Edit: func(m *models.Message) {
		m.Entities = []models.MessageEntity{{Type: models.MessageEntityTypeMention, Offset: 0, Length: telegramtest.UTF16Len(fan)}}
	}})
	f.srv.Send(telegramtest.Update{ChatID: -410, Text: "write to help" + "@" + telegramtest.BotUsername + ".example.com"})
	f.srv.Send(telegramtest.Update{ChatID: -410, Text: "and you, @" + telegramtest.BotUsername + "?"})
	if m := sink.Next(t); !strings.HasPrefix(m.Text(), "and you") {
		t.Fatalf("delivered %q; want only the message that names the bot", m.Text())
	}
	sink.ExpectNone(t, 200*time.Millisecond)
}

// A group admin who writes "as the group" (Telegram's remain anonymous) is not a bot: with
// dm_policy open the message is taken, from the group; with an allowlist it cannot be
// listed (no user id), and the log says so. A linked channel's post forwarded into its
// discussion group stays out.
func TestAnonymousGroupAdmin(t *testing.T) {
	anon := &models.User{ID: 1087968824, IsBot: true, FirstName: "Group", Username: "GroupAnonymousBot"}
	asGroup := func(chat int64) func(m *models.Message) {
		return func(m *models.Message) {
			m.SenderChat = &models.Chat{ID: chat, Type: models.ChatTypeSupergroup, Title: "Book club"}
		}
	}
	f := newFixture(t)
	sink := channeltest.NewSink()
	cfg := f.config()
	cfg.DMPolicy = channels.DMOpen
	f.start(cfg, f.options(), sink)
	f.srv.Send(telegramtest.Update{ChatID: -1005, From: anon, Mention: true, Text: "from a linked channel", Edit: asGroup(-1009)})
	f.srv.Send(telegramtest.Update{ChatID: -1005, From: anon, Mention: true, Text: "what do we read next?", Edit: asGroup(-1005)})
	m := sink.Next(t)
	if m.Text() != "what do we read next?" || m.UserID != "-1005" || m.UserName != "Book club" || m.ChatID != "-1005" {
		t.Fatalf("delivered %q from %s (%q) in %s; want the admin's message, from the group", m.Text(), m.UserID, m.UserName, m.ChatID)
	}

	f2 := newFixture(t)
	sink2 := channeltest.NewSink()
	f2.start(f2.config(), f2.options(), sink2)
	f2.srv.Send(telegramtest.Update{ChatID: -1005, From: anon, Mention: true, Text: "anyone?", Edit: asGroup(-1005)})
	f2.srv.Send(telegramtest.Update{ChatID: 1001, Text: "marker"})
	if m := sink2.Next(t); m.Text() != "marker" {
		t.Fatalf("with an allowlist, delivered %q from %s", m.Text(), m.UserID)
	}
	// The two chats of one batch are handled side by side: the marker may come first.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(f2.logs.String(), "anonymous admin"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not say why the anonymous admin was not answered:\n%s", f2.logs.String())
		}
	}
	sink2.ExpectNone(t, 200*time.Millisecond)
}
