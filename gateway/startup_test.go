package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"gateway/channels"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
	"gateway/channels/slack"
	"gateway/channels/slack/slacktest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/harness"
	"gateway/hooks"
	"gateway/internal/fakeserver"
	"gateway/internal/secret"
)

// The tests of a start while a platform is down: the gateway serves what it can and keeps
// trying the rest in the background.

const startUser = "4242"

var startAccess = channels.Access{AllowFrom: []string{startUser, strconv.Itoa(telegramtest.UserID)}, DMPolicy: channels.DMAllowlist}

// quickRetries makes the background start attempts come within a fraction of a second.
func quickRetries(e *testEnv) {
	e.g.retryWait = startBackoff{first: 50 * time.Millisecond, max: 200 * time.Millisecond}
}

// answering makes the fake model answer every message with "re: " and its text.
func answering(e *testEnv) {
	e.fake.SetFunc(func(req *harness.Request) harness.FakeReply { return harness.FakeReply{Text: "re: " + lastUser(*req)} })
}

func newDiscord(t *testing.T, srv *discordtest.Server, token string) *discord.Channel {
	t.Helper()
	ch, err := discord.New(discord.Config{Enabled: true, Token: secret.Secret(token), APIURL: srv.URL, Access: startAccess},
		discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func newSlack(t *testing.T, apiURL string) *slack.Channel {
	t.Helper()
	ch, err := slack.New(slack.Config{Enabled: true, BotToken: secret.Secret(slacktest.BotToken), AppToken: secret.Secret(slacktest.AppToken),
		APIURL: apiURL, Access: startAccess}, slack.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func newPollingTelegram(t *testing.T, tg *telegramtest.Server) *telegram.Channel {
	t.Helper()
	ch, err := telegram.New(telegram.Config{Enabled: true, Token: secret.Secret(tg.Token), APIURL: tg.URL, Mode: telegram.ModePolling, Access: startAccess},
		telegram.Options{StateDir: t.TempDir(), PollTimeout: time.Second, Pacing: telegram.Pacing{GlobalPerSecond: -1, PerChatInterval: -1, GroupInterval: -1}})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// readiness is /readyz as a load balancer reads it.
type readiness struct {
	code     int
	Reason   string          `json:"reason"`
	Channels map[string]bool `json:"channels"`
}

func (e *testEnv) readiness(t *testing.T) readiness {
	t.Helper()
	resp, err := http.Get(e.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	r := readiness{code: resp.StatusCode}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("/readyz answered %s: %v", body, err)
	}
	return r
}

// webAnswers checks that the web chat answers a message.
func webAnswers(t *testing.T, e *testEnv, chat string) {
	t.Helper()
	c := e.client(t, chat)
	c.say("hello from the web")
	fs := c.until("done", "error")
	if last := fs[len(fs)-1]; last.Type != "done" || !strings.Contains(last.Text, "re: hello from the web") {
		t.Fatalf("the web chat got %v %q; want the answer", types(fs), last.Text)
	}
}

// Discord's gateway refuses connections (503) when the gateway starts: the gateway starts
// all the same, the web chat and Telegram answer, readiness says Discord is disconnected.
// Once Discord lets it in, the gateway connects on its own (after more than one attempt),
// answers first the Discord message journaled before the restart, then a new one, sets
// Discord's command menu, and emits gateway:startup only then, after discord's channel:connect.
func TestStartServesWhileDiscordIsDown(t *testing.T) {
	dir := t.TempDir()
	db := openState(t, dir)
	defer db.Close()
	dc := discordtest.New(t)
	dc.RefuseGateway(true)
	// A Discord message taken (journaled) before the restart and not answered yet.
	oldID := dc.InjectDM("dm-1", startUser, "the old one")
	body, err := encode(&channels.Message{ID: oldID, Channel: discord.Name, ChatID: "dm-1", UserID: startUser, ChatType: channels.ChatDM,
		Parts: []channels.Part{channels.TextPart("the old one")}, Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Accept(discord.Name+"|dm-1|"+oldID, body); err != nil {
		t.Fatal(err)
	}
	tg := telegramtest.NewServer(t)
	var log *eventLog
	e := buildEnv(t, filepath.Join(dir, "sessions"), []channels.Channel{newDiscord(t, dc, dc.Bot().Token), newPollingTelegram(t, tg)},
		withObserver(&log), func(_ *Config, _ *Runtime, d *Deps) { d.Journal, d.Settings = db, db })
	quickRetries(e)
	answering(e)
	if err := e.start(); err != nil {
		t.Fatalf("the gateway did not start while Discord was down: %v", err)
	}

	if r := e.readiness(t); r.code != http.StatusServiceUnavailable || !strings.Contains(r.Reason, "discord") || r.Channels["discord"] {
		t.Fatalf("/readyz while Discord is down: %d %q %v; want 503 naming discord, discord disconnected", r.code, r.Reason, r.Channels)
	}
	webAnswers(t, e, "w1")
	tg.Send(telegramtest.Update{ChatID: telegramtest.UserID, Text: "hello from telegram"})
	waitUntil(t, "the Telegram answer", func() bool {
		m := tg.Messages(telegramtest.UserID)
		return len(m) > 0 && strings.Contains(m[len(m)-1].Text, "re: hello from telegram")
	})
	if got := dc.Posted("dm-1"); len(got) != 0 {
		t.Fatalf("Discord got answers while its gateway was down: %+v", got)
	}

	waitUntil(t, "a background attempt to connect to Discord", func() bool { return dc.Refused() >= 2 })
	dc.RefuseGateway(false)
	waitUntil(t, "readiness once Discord is back", func() bool { return e.readiness(t).code == http.StatusOK })
	if n := dc.Refused(); n < 2 {
		t.Fatalf("Discord saw %d refused connections; want the start's and at least one retry", n)
	}
	dc.InjectDM("dm-1", startUser, "the new one")
	waitUntil(t, "both Discord answers", func() bool { return len(dc.Posted("dm-1")) >= 2 })
	var got []string
	for _, m := range dc.Posted("dm-1") {
		got = append(got, m.Content)
	}
	if !slices.Equal(got, []string{"re: the old one", "re: the new one"}) {
		t.Fatalf("Discord answers %q; want the journaled message answered first, then the new one", got)
	}
	waitUntil(t, "Discord's command menu", func() bool { return len(dc.AppCommands(dc.Bot().ID)) > 0 })

	// DESIGN: gateway:startup after every enabled channel is connected, so after discord's.
	startup := waitEvent(t, log, "gateway:startup", func(*hooks.GatewayStartup) bool { return true })
	for _, want := range []string{"discord", "web", "telegram"} {
		if !slices.Contains(startup.Channels, want) {
			t.Fatalf("gateway:startup lists %v; want every channel, %s included", startup.Channels, want)
		}
	}
	names := log.names()
	if i, j := slices.Index(names, hooks.NameGatewayStartup), slices.IndexFunc(log.all(), func(ev hooks.Event) bool {
		c, ok := ev.(*hooks.ChannelConnect)
		return ok && c.Channel == "discord"
	}); j < 0 || j > i || slices.Index(names[i+1:], hooks.NameGatewayStartup) >= 0 {
		t.Fatalf("events %v; want discord's channel:connect, then one gateway:startup", names)
	}
}

// Slack's apps.connections.open answers 503 when the gateway starts: the gateway starts,
// the web chat answers, readiness says Slack is disconnected; once Slack answers again the
// gateway connects on its own, after more than one attempt, and a Slack message is answered.
func TestStartServesWhileSlackIsDown(t *testing.T) {
	sl := slacktest.New(t)
	sl.FailNext(1_000_000, fakeserver.Failure{Method: "apps.connections.open", Status: http.StatusServiceUnavailable})
	e := buildEnv(t, t.TempDir(), []channels.Channel{newSlack(t, sl.APIURL())})
	quickRetries(e)
	answering(e)
	if err := e.start(); err != nil {
		t.Fatalf("the gateway did not start while Slack was down: %v", err)
	}
	if r := e.readiness(t); r.code != http.StatusServiceUnavailable || !strings.Contains(r.Reason, "slack") || r.Channels["slack"] {
		t.Fatalf("/readyz while Slack is down: %d %q %v; want 503 naming slack, slack disconnected", r.code, r.Reason, r.Channels)
	}
	webAnswers(t, e, "w1")

	waitUntil(t, "a background attempt to connect to Slack", func() bool { return len(sl.Calls("apps.connections.open")) >= 2 })
	sl.ClearFailures()
	waitUntil(t, "readiness once Slack is back", func() bool { return e.readiness(t).code == http.StatusOK })
	sl.DM("D1", startUser, "hello from slack")
	waitUntil(t, "the Slack answer", func() bool {
		p := sl.Posted("D1")
		return len(p) > 0 && strings.Contains(p[len(p)-1].Text, "re: hello from slack")
	})
	if n := len(sl.Calls("apps.connections.open")); n < 3 {
		t.Fatalf("apps.connections.open was called %d times; want the start's, a failed retry and the one that connected", n)
	}
}

// Every channel but the always-local web chat down at start (Slack's api_url a closed
// port): the gateway runs, not ready, and keeps trying.
func TestStartWithSlackUnreachable(t *testing.T) {
	closed := fakeserver.New(http.NotFoundHandler())
	url := closed.URL + "/api/"
	closed.Close()
	e := buildEnv(t, t.TempDir(), []channels.Channel{newSlack(t, url)})
	quickRetries(e)
	answering(e)
	if err := e.start(); err != nil {
		t.Fatalf("the gateway did not start with Slack unreachable: %v", err)
	}
	webAnswers(t, e, "w1")
	if r := e.readiness(t); r.code != http.StatusServiceUnavailable || r.Channels["slack"] {
		t.Fatalf("/readyz with Slack unreachable: %d %q %v", r.code, r.Reason, r.Channels)
	}
}

// A token Discord rejects (401) still fails the start at once, with a plain error that
// names the channel, and leaves the other channels stopped.
func TestStartFailsOnARejectedToken(t *testing.T) {
	dc := discordtest.New(t)
	e := buildEnv(t, t.TempDir(), []channels.Channel{newDiscord(t, dc, "fake.not-a-real-token.abcdef0123456789")})
	quickRetries(e)
	err := e.start()
	if err == nil {
		t.Fatal("the gateway started with a rejected Discord token")
	}
	if msg := err.Error(); !strings.Contains(msg, "discord") || !strings.Contains(msg, "token was rejected") {
		t.Fatalf("start error %q; want it to name discord and the rejected token", msg)
	}
	resp, err := http.Get(e.url + "/ws?chat_id=x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("the web chat answers %s after the start failed; want it stopped (503)", resp.Status)
	}
}

// Stop while a channel is still being retried returns at once and leaves no goroutine of
// the retry (nor of the adapter) behind.
func TestStopDuringBackgroundStart(t *testing.T) {
	dc := discordtest.New(t)
	dc.RefuseGateway(true)
	before := goleak.IgnoreCurrent()
	e := buildEnv(t, t.TempDir(), []channels.Channel{newDiscord(t, dc, dc.Bot().Token)})
	quickRetries(e)
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a background attempt to connect to Discord", func() bool { return dc.Refused() >= 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.g.Stop(ctx); err != nil {
		t.Fatalf("Stop during the background start: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Stop used up its whole deadline")
	}
	refused := dc.Refused()
	time.Sleep(300 * time.Millisecond) // longer than the retries' backoff
	if n := dc.Refused(); n != refused {
		t.Fatalf("Discord saw %d more connection attempts after Stop", n-refused)
	}
	e.http.Close()
	goleak.VerifyNone(t, before)
}

// Slack's API hangs (it takes the connection and never answers) while the gateway starts:
// the web chat, connected at once, answers its users while Slack's first attempt is still
// waiting, rather than holding their messages until that attempt times out.
func TestWebAnswersWhileSlacksFirstAttemptHangs(t *testing.T) {
	release := make(chan struct{})
	hole := fakeserver.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	e := buildEnv(t, t.TempDir(), []channels.Channel{newSlack(t, hole.URL+"/api/")})
	answering(e)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- e.g.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-started; close(release); hole.Close() })
	// Start opens the web chat on its own goroutine: a user who comes before that is
	// turned away (503) and comes back, as the web page's client does.
	waitUntil(t, "the web chat to open", func() bool { return e.readiness(t).Channels["web"] })
	webAnswers(t, e, "w1")
	select {
	case err := <-started:
		t.Fatalf("Start returned (%v) before the test let Slack's attempt end; the test shows nothing", err)
	default:
	}
}
