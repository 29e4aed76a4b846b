package gatewaycli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"gateway/channels/discord/discordtest"
	"gateway/channels/slack/slacktest"
	"gateway/channels/telegram/telegramtest"
)

// adminPost posts body as JSON to the gateway's admin API and returns the status and the
// answer's "error" (or its whole text when it has none).
func (g *liveGateway) adminPost(path string, body map[string]any) (int, string) {
	g.t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post("http://"+g.addr+path, "application/json", strings.NewReader(string(b)))
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &out) == nil && out.Error != "" {
		return resp.StatusCode, out.Error
	}
	return resp.StatusCode, string(data)
}

// TestAdminAPIRefusesChatIDsNoPlatformHas: send and inject to a chat id (or thread id) the
// platform cannot have answer 400 saying what an id looks like, on Telegram, Discord and
// Slack alike; nothing reaches the platform or the model, and no session is made for it.
// Inject took any id and made a session for it, and a malformed Discord or Slack id went
// to the platform and came back 502. A well-formed id of a chat the platform does not
// know yet still goes to the platform.
func TestAdminAPIRefusesChatIDsNoPlatformHas(t *testing.T) {
	tg := telegramtest.NewServer(t)
	dc := discordtest.New(t)
	sl := slacktest.New(t)
	g := startGateway(t, t.TempDir(), fmt.Sprintf(`channels:
  telegram: {enabled: true, token: %q, api_url: %s, allow_from: [%q]}
  discord: {enabled: true, token: %q, api_url: %s, allow_from: [%q]}
  slack: {enabled: true, bot_token: %q, app_token: %q, api_url: %s, allow_from: [%q]}
`, telegramtest.Token, tg.URL, fmt.Sprint(telegramtest.UserID), dc.Bot().Token, dc.URL, dcUser,
		slacktest.BotToken, slacktest.AppToken, sl.APIURL(), slackUser))

	bad := []struct {
		channel, chat, thread, says string
	}{
		{"telegram", "general", "", "is not a Telegram chat id"},
		{"telegram", "4242", "news", "is not a Telegram topic id"},
		{"discord", "general", "", "is not a Discord channel id"},
		{"discord", "-92000000000000001", "", "is not a Discord channel id"},
		{"discord", "18446744073709551616", "", "is not a Discord channel id"}, // past 64 bits
		{"discord", dcChannel, "thread-1", "is not a Discord thread id"},
		{"slack", "general", "", "is not a Slack channel or user id"},
		{"slack", "#general", "", "is not a Slack channel or user id"},
		{"slack", "c0000chan", "", "is not a Slack channel or user id"},
		{"slack", slackGroup, "yesterday", "is not a Slack thread"},
	}
	for _, c := range bad {
		target := map[string]any{"channel": c.channel, "chat_id": c.chat, "thread_id": c.thread}
		send := map[string]any{"text": "Backup done"}
		inject := map[string]any{"text": "remind me of the backup", "trigger": true}
		for path, body := range map[string]map[string]any{"/api/v1/send": send, "/api/v1/inject": inject} {
			for k, v := range target {
				body[k] = v
			}
			if code, msg := g.adminPost(path, body); code != http.StatusBadRequest || !strings.Contains(msg, c.says) {
				t.Errorf("%s to %s chat %q thread %q: %d %q; want 400 saying it %s", path, c.channel, c.chat, c.thread, code, msg, c.says)
			}
		}
	}
	if n := len(tg.Calls("sendMessage")) + len(sl.Calls("chat.postMessage")) + len(discordPosts(dc, "")); n != 0 {
		t.Errorf("%d messages reached the platforms for malformed chats; want none", n)
	}
	if n := len(g.oai.Requests()); n != 0 {
		t.Errorf("the model was asked %d times for malformed chats; want never", n)
	}
	if _, status := g.get("/api/v1/status"); strings.Contains(status, "general") || strings.Contains(status, "4242") {
		t.Errorf("sessions were made for malformed chats: %s", status)
	}

	// Well-formed ids of chats the platforms have not shown the gateway, but where the bot
	// is (added to the channel, or a user the app may DM): each goes to its platform.
	const tgNew, dcNew, slNew = "4243", "93000000000000001", "C0000NEW1"
	tg.AddChat(4243)
	dc.AddGuildChannel(dcNew)
	sl.AddChannel(slNew)
	// A Slack user id is a target too: chat.postMessage takes it as the app's DM with them.
	sl.SetUser("U0000USER", "", "")
	for _, c := range [][2]string{{"telegram", tgNew}, {"discord", dcNew}, {"slack", slNew}, {"slack", "U0000USER"}} {
		if code, msg := g.adminPost("/api/v1/send", map[string]any{"channel": c[0], "chat_id": c[1], "text": "Backup done"}); code != http.StatusOK {
			t.Errorf("send to %s chat %s: %d %q; want 200", c[0], c[1], code, msg)
		}
	}
	for _, c := range [][2]string{{"telegram", tgNew}, {"discord", dcNew}, {"slack", slNew}} {
		if code, msg := g.adminPost("/api/v1/inject", map[string]any{"channel": c[0], "chat_id": c[1], "text": "remind me of the backup", "trigger": true}); code != http.StatusAccepted {
			t.Errorf("inject to %s chat %s: %d %q; want 202", c[0], c[1], code, msg)
		}
	}
	waitFor(t, "the injected turns' answers reach the platforms", func() bool {
		return len(tg.Messages(4243)) >= 2 && len(sl.Posted(slNew)) >= 2 && len(dc.Posted(dcNew)) >= 2
	}, g.log)

	// Well-formed ids of chats the platform refuses (deleted, or the bot is not in them):
	// 502, as any delivery the platform refuses, saying so in words rather than in the
	// platform's JSON.
	for _, c := range [][2]string{{"telegram", "-1009900000404"}, {"discord", "93000000000000404"}, {"slack", "C0000GONE"}} {
		code, msg := g.adminPost("/api/v1/send", map[string]any{"channel": c[0], "chat_id": c[1], "text": "Backup done"})
		if code != http.StatusBadGateway || !strings.Contains(msg, "deleted") || strings.Contains(msg, "{") {
			t.Errorf("send to unknown %s chat %s: %d %q; want 502 saying it was deleted or the bot is not in it", c[0], c[1], code, msg)
		}
	}
}

// discordPosts lists the message posts Discord was asked for in channel ("" for any).
func discordPosts(dc *discordtest.Server, channel string) []discordtest.Call {
	var out []discordtest.Call
	for _, c := range dc.Calls() {
		if c.Method == http.MethodPost && strings.HasSuffix(c.Path, "/messages") && strings.Contains(c.Path, "/channels/"+channel) {
			out = append(out, c)
		}
	}
	return out
}
