package gateway

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

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

// platformsEnv is a gateway with Discord and Slack adapters on their fakes.
func platformsEnv(t *testing.T, opts ...envOpt) (*testEnv, *discordtest.Server, *slacktest.Server) {
	t.Helper()
	dc := discordtest.New(t)
	dcCh, err := discord.New(discord.Config{Enabled: true, Token: secret.Secret(dc.Bot().Token), APIURL: dc.URL,
		Access: channels.Access{AllowFrom: []string{"4242"}, DMPolicy: channels.DMAllowlist}},
		discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sl := slacktest.New(t)
	slCh, err := slack.New(slack.Config{Enabled: true, BotToken: secret.Secret(slacktest.BotToken), AppToken: secret.Secret(slacktest.AppToken),
		APIURL: sl.APIURL(), Access: channels.Access{AllowFrom: []string{"U4242"}, DMPolicy: channels.DMAllowlist}}, slack.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return newEnvWith(t, t.TempDir(), []channels.Channel{dcCh, slCh}, opts...), dc, sl
}

// discordPostsTo counts the message posts Discord was asked for in channel, and how many
// it refused.
func discordPostsTo(dc *discordtest.Server, channel string) (all, refused int) {
	for _, c := range dc.Calls() {
		if c.Method == http.MethodPost && c.Path == "/api/v9/channels/"+channel+"/messages" {
			all++
			if c.Status >= 400 {
				refused++
			}
		}
	}
	return all, refused
}

// TestAPISendToAChatThePlatformDoesNotKnow: POST /api/v1/send to a well-formed id of a chat
// the platform refuses (deleted, or the bot is not in it) is answered 502, as documented
// for a delivery the platform refuses, with an error that says in words what is wrong and
// what to check, not the platform's JSON or bare code; the platform is asked once (no
// retry mends it), and a send to a chat it knows still goes.
func TestAPISendToAChatThePlatformDoesNotKnow(t *testing.T) {
	e, dc, sl := platformsEnv(t)
	const dcGone, slGone = "93000000000000404", "C0000GONE"
	cases := []struct {
		channel, chat string
		asked         func() int
	}{
		{"discord", dcGone, func() int { n, _ := discordPostsTo(dc, dcGone); return n }},
		{"slack", slGone, func() int { return len(sl.Calls("chat.postMessage")) }},
	}
	for _, c := range cases {
		code, out := apiPost(t, e.url+"/api/v1/send", "", map[string]any{"channel": c.channel, "chat_id": c.chat, "text": "Backup done"})
		msg, _ := out["error"].(string)
		if code != http.StatusBadGateway || !strings.Contains(msg, "deleted") || !strings.Contains(msg, "not in it") ||
			!strings.Contains(msg, c.chat) {
			t.Errorf("send to unknown %s chat %s: %d %q; want 502 saying the chat was deleted or the bot is not in it", c.channel, c.chat, code, msg)
		}
		if strings.Contains(msg, "{") || strings.Contains(msg, "HTTP 404") {
			t.Errorf("send to unknown %s chat: the error carries the platform's raw answer: %q", c.channel, msg)
		}
		if n := c.asked(); n != 1 {
			t.Errorf("%s was asked %d times to post in the unknown chat; want once", c.channel, n)
		}
	}
	dc.AddGuildChannel("93000000000000405")
	sl.AddChannel("C0000HERE")
	for _, c := range [][2]string{{"discord", "93000000000000405"}, {"slack", "C0000HERE"}} {
		if code, out := apiPost(t, e.url+"/api/v1/send", "", map[string]any{"channel": c[0], "chat_id": c[1], "text": "Backup done"}); code != http.StatusOK {
			t.Errorf("send to known %s chat %s: %d %v", c[0], c[1], code, out)
		}
	}
}

// TestAPISendToATelegramChatTheBotCannotReach: POST /api/v1/send to a well-formed id of a
// Telegram chat Telegram refuses (no user started the bot there, or the bot is not in the
// group) is answered 502, with an error that says in words what is wrong and what to
// check, not Telegram's bare description; Telegram is asked once (no retry mends it); the
// same for a user who blocked the bot; and a send to a chat the bot may post in still goes.
func TestAPISendToATelegramChatTheBotCannotReach(t *testing.T) {
	tg := telegramtest.NewServer(t)
	ch, err := telegram.New(telegram.Config{Enabled: true, Token: secret.Secret(tg.Token), APIURL: tg.URL, Mode: telegram.ModePolling,
		Access: channels.Access{AllowFrom: []string{"4242"}, DMPolicy: channels.DMAllowlist}}, telegram.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, t.TempDir(), []channels.Channel{ch})
	sends := func(chat string) int {
		n := 0
		for _, c := range tg.Calls("sendMessage") {
			if c.Params["chat_id"] == chat {
				n++
			}
		}
		return n
	}
	const blocked = "4243"
	tg.AddChat(4243)
	tg.FailNext(1, fakeserver.Failure{Status: http.StatusForbidden, Message: "Forbidden: bot was blocked by the user", Chat: blocked})
	cases := []struct{ chat, words string }{
		{"-1009900000404", "deleted, or the bot is not in it"},
		{blocked, "the user blocked the bot"},
	}
	for _, c := range cases {
		code, out := apiPost(t, e.url+"/api/v1/send", "", map[string]any{"channel": "telegram", "chat_id": c.chat, "text": "Backup done"})
		msg, _ := out["error"].(string)
		if code != http.StatusBadGateway || !strings.Contains(msg, c.words) || !strings.Contains(msg, c.chat) {
			t.Errorf("send to unreachable Telegram chat %s: %d %q; want 502 saying %q", c.chat, code, msg, c.words)
		}
		if strings.Contains(msg, "bad request,") || strings.Contains(msg, "forbidden,") || strings.Contains(msg, "{") || strings.Contains(msg, tg.Token) {
			t.Errorf("send to unreachable Telegram chat %s: the error is Telegram's raw answer: %q", c.chat, msg)
		}
		if n := sends(c.chat); n != 1 {
			t.Errorf("Telegram was asked %d times to post in unreachable chat %s; want once", n, c.chat)
		}
	}
	tg.AddChat(4244)
	if code, out := apiPost(t, e.url+"/api/v1/send", "", map[string]any{"channel": "telegram", "chat_id": "4244", "text": "Backup done"}); code != http.StatusOK {
		t.Errorf("send to a Telegram chat the bot may post in: %d %v", code, out)
	}
	if m := tg.Messages(4244); len(m) != 1 || m[0].Text != "Backup done" {
		t.Errorf("the reachable chat shows %+v; want the message", m)
	}
}

// TestAnswerToAChannelThatVanished: a Discord channel deleted while its answer was being
// made fails the answer's delivery once, told to the admin (gateway:error, stage delivery,
// in words), and nothing keeps posting there: another chat's answer, asked for after the
// failure, goes through, and the vanished channel is not tried again meanwhile.
func TestAnswerToAChannelThatVanished(t *testing.T) {
	const gone, other = "94000000000000001", "94000000000000002"
	var dc *discordtest.Server
	var once sync.Once
	var log *eventLog
	e, srv, _ := platformsEnv(t, withObserver(&log))
	dc = srv
	e.fake.SetFunc(func(req *harness.Request) harness.FakeReply {
		if strings.Contains(lastUserText(req), "soon deleted") {
			once.Do(func() { dc.DeleteChannel(gone) }) // a moderator deletes it while the model thinks
		}
		return harness.FakeReply{Chunks: []string{"Here ", "is ", "the ", "answer."}, ChunkDelay: 50 * time.Millisecond}
	})
	dc.InjectGuild(gone, "4242", "soon deleted", true)
	gerr := waitEvent(t, log, "gateway:error for the vanished channel", func(ev *hooks.GatewayError) bool {
		return ev.ChatID == gone && ev.Stage == "delivery"
	})
	if !strings.Contains(gerr.Error, "deleted") || strings.Contains(gerr.Error, "{") {
		t.Errorf("gateway:error says %q; want it to tell in words that the channel was deleted", gerr.Error)
	}
	tried, _ := discordPostsTo(dc, gone)

	dc.InjectGuild(other, "4242", "still there?", true)
	deadline := time.Now().Add(30 * time.Second)
	for !hasPost(dc.Posted(other), "Here is the answer.") {
		if time.Now().After(deadline) {
			t.Fatalf("the other channel got %+v; want its answer", dc.Posted(other))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if again, _ := discordPostsTo(dc, gone); again != tried {
		t.Errorf("the vanished channel was tried %d more times after its delivery failed", again-tried)
	}
	if n := countEvents(log, func(ev *hooks.GatewayError) bool { return ev.ChatID == gone }); n != 1 {
		t.Errorf("%d gateway:error events for the vanished channel; want 1", n)
	}
}

func hasPost(ms []discordtest.Message, text string) bool {
	for _, m := range ms {
		if m.Content == text {
			return true
		}
	}
	return false
}

// lastUserText is the text of the request's last user message.
func lastUserText(req *harness.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			return req.Messages[i].Content
		}
	}
	return ""
}
