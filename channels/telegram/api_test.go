package telegram

import (
	"context"
	"log/slog"
	"testing"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"gateway/channels/telegram/telegramtest"
	"gateway/internal/secret"
)

// BenchmarkSendMessage is one answer's sendMessage against the fake Bot API: through the
// SDK (multipart written through a pipe by a goroutine of its own) and as the adapter now
// sends it (a JSON body). Both include the fake's side.
func BenchmarkSendMessage(b *testing.B) {
	srv := telegramtest.NewServer(b)
	c, err := New(Config{Enabled: true, Token: secret.Secret(telegramtest.Token), APIURL: srv.URL},
		Options{Logger: slog.New(slog.DiscardHandler), StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	p := &bot.SendMessageParams{ChatID: int64(telegramtest.UserID), Text: "<b>an answer</b> of a few words, as a model writes them",
		ParseMode: models.ParseModeHTML, ReplyParameters: &models.ReplyParameters{MessageID: 1, AllowSendingWithoutReply: true}}
	ctx := context.Background()
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.api.SendMessage(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.sendMessage(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
