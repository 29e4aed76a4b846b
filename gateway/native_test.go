package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/go-telegram/bot/models"

	"gateway/channels"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/internal/secret"
)

// Telegram's command menu is the registry (builtins and a hook's /pop), set through the
// real go-telegram client; the menu's /pop reaches the hook command.
func TestTelegramMenuOffersHookCommands(t *testing.T) {
	needPython(t)
	tg := telegramtest.NewServer(t)
	ch, err := telegram.New(telegram.Config{Enabled: true, Token: secret.Secret(tg.Token), APIURL: tg.URL, Mode: telegram.ModePolling,
		Access: channels.Access{AllowFrom: []string{"4242"}, DMPolicy: channels.DMAllowlist}}, telegram.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, t.TempDir(), []channels.Channel{ch}, withHookDirs(t, exampleHook(t, "pop")))
	var names []string
	for _, c := range tg.Commands() {
		names = append(names, c.Command)
	}
	if got := strings.Join(names, ","); got != "new,stop,compact,status,voice,help,pop" {
		t.Fatalf("telegram menu %q", got)
	}
	tg.Send(telegramtest.Update{ChatID: 4242, From: &models.User{ID: 4242, FirstName: "Ann"}, Text: "/pop"})
	deadline := time.Now().Add(20 * time.Second)
	for {
		var texts []string
		for _, m := range tg.Messages(4242) {
			texts = append(texts, m.Text)
		}
		if strings.Contains(strings.Join(texts, "|"), "There is nothing to pop yet.") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bot posted %q", texts)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(e.fake.Requests()) != 0 {
		t.Fatal("/pop reached the model")
	}
}
