package gateway

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/telegram/telegramtest"
	"gateway/harness/openaitest"
)

// What a chat user reads is in plain words: the settings behind it (config keys such as
// llm.max_tokens or tts.mode) and the server's paths are the admin's, in the log.

// tgUser is a Telegram user in a private chat with a gateway, through the fake Bot API,
// and the gateway's log.
type tgUser struct {
	t    *testing.T
	tg   *telegramtest.Server
	e    *testEnv
	logs *channeltest.LogBuffer
}

func newTGUser(t *testing.T, opts ...envOpt) *tgUser {
	t.Helper()
	tg := telegramtest.NewServer(t)
	u := &tgUser{t: t, tg: tg, logs: &channeltest.LogBuffer{}}
	opts = append(opts, func(_ *Config, _ *Runtime, d *Deps) { d.Logger = slog.New(slog.NewTextHandler(u.logs, nil)) })
	u.e = newEnvWith(t, t.TempDir(), []channels.Channel{groupTelegram(t, tg, fmt.Sprint(telegramtest.UserID))}, opts...)
	return u
}

// ask sends text and returns what the bot shows in the chat once one of its messages
// since contains want (the whole of its messages since, joined).
func (u *tgUser) ask(text, want string) string {
	u.t.Helper()
	const chat = telegramtest.UserID
	before := len(u.tg.Messages(chat))
	u.tg.Send(telegramtest.Update{ChatID: chat, Text: text})
	msgs := waitPosted(u.t, u.tg, chat, fmt.Sprintf("an answer to %q saying %q", text, want), func(m []telegramtest.Message) bool {
		for _, x := range m[min(before, len(m)):] {
			if strings.Contains(x.Text, want) {
				return true
			}
		}
		return false
	})
	var texts []string
	for _, x := range msgs[before:] {
		texts = append(texts, x.Text)
	}
	return strings.Join(texts, "\n")
}

// assertPlain fails when the chat's text names a config key or a path.
func assertPlain(t *testing.T, what, text string) {
	t.Helper()
	// What gives away a config key or a server path in a chat's text.
	for _, w := range []string{"llm.", "tts.", "stt.", "hooks.", "state_dir", "channels.", "sessions.", "profiles.", "turn_timeout", "max_tokens", "/tmp/"} {
		if strings.Contains(text, w) {
			t.Errorf("%s: the chat read %q, which names %q", what, text, w)
		}
	}
}

// An answer cut at the length limit told the chat "(llm.max_tokens)". The chat reads that
// it reached the limit; the log names the setting, for the admin.
func TestAnswerAtTheLengthLimitIsToldPlainly(t *testing.T) {
	srv, opt := withOpenAIFake(t, 0)
	u := newTGUser(t, opt)
	srv.Push(openaitest.Reply{Text: "Step one, step two,", FinishReason: "length"}, openaitest.Reply{Text: "", FinishReason: "length"})

	got := u.ask("all the steps", "Ask me to go on")
	assertPlain(t, "a cut answer", got)
	if !strings.Contains(got, "Step one, step two,") || !strings.Contains(got, "length limit") {
		t.Errorf("a cut answer reads %q; want its words and that it reached the length limit", got)
	}
	got = u.ask("and again", "before writing anything")
	assertPlain(t, "an answer cut before it began", got)
	if !strings.Contains(u.logs.String(), "llm.max_tokens") {
		t.Errorf("the log does not name llm.max_tokens:\n%s", u.logs.String())
	}
}
