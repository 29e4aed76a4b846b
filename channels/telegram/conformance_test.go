package telegram_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/go-telegram/bot/models"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/internal/fakeserver"
	"gateway/internal/secret"
)

const badToken = "7000001:WrongTokenTheFakeRejects-abc"

// platform drives the fake Bot API for the conformance suite.
type platform struct {
	srv *telegramtest.Server
}

func TestConformance(t *testing.T) {
	channeltest.Run(t, func(t *testing.T) channeltest.Platform {
		return &platform{srv: telegramtest.NewServer(t)}
	})
}

func (p *platform) Features() channeltest.Features {
	return channeltest.Features{Edits: true, Typing: true, VoiceIn: true, VoiceOut: true, Groups: true, Threads: true,
		RateLimit: true, Access: true, Tokens: true, MaxLen: telegram.MaxText, VoiceMIME: "audio/ogg"}
}

func (p *platform) NewChannel(t testing.TB, env channeltest.Env) channels.Channel {
	token := telegramtest.Token
	if env.BadToken {
		token = badToken
	}
	ch, err := telegram.New(telegram.Config{Enabled: true, Token: secret.Secret(token), APIURL: p.srv.URL, Access: env.Access},
		telegram.Options{Logger: env.Logger, StateDir: env.StateDir, PollTimeout: 5 * time.Second, State: env.State})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func (p *platform) Secrets() []string { return []string{telegramtest.Token, badToken} }

func (p *platform) Inject(t testing.TB, in channeltest.Inbound) string {
	chat, err := strconv.ParseInt(in.ChatID, 10, 64)
	if err != nil {
		t.Fatalf("chat id %q: %v", in.ChatID, err)
	}
	if in.Group && chat > 0 {
		chat = -chat // Telegram group ids are negative
	}
	user, err := strconv.ParseInt(in.UserID, 10, 64)
	if err != nil {
		t.Fatalf("user id %q: %v", in.UserID, err)
	}
	u := telegramtest.Update{ChatID: chat, From: &models.User{ID: user, FirstName: "User" + in.UserID}, Text: in.Text, Mention: in.Mention}
	if in.ThreadID != "" {
		u.ThreadID, _ = strconv.Atoi(in.ThreadID)
	}
	if in.ID != "" {
		u.MessageID, _ = strconv.Atoi(in.ID)
	}
	if in.Audio != nil {
		u.Voice, u.VoiceMIME = in.Audio, in.AudioMIME
	}
	_, id := p.srv.Send(u)
	return strconv.Itoa(id)
}

func (p *platform) Posted(chatID string) []channeltest.Posted {
	chat, _ := strconv.ParseInt(chatID, 10, 64)
	var out []channeltest.Posted
	for _, m := range p.srv.Messages(chat) {
		ps := channeltest.Posted{ID: strconv.Itoa(m.ID), ChatID: chatID, Text: m.Text, Edits: m.Edits, Time: m.Time}
		if m.ThreadID != 0 {
			ps.ThreadID = strconv.Itoa(m.ThreadID)
		}
		if m.Kind == "voice" || m.Kind == "audio" {
			ps.Audio, ps.Voice = m.File, m.Kind == "voice"
		}
		out = append(out, ps)
	}
	return out
}

func (p *platform) Typing(chatID string) int {
	chat, _ := strconv.ParseInt(chatID, 10, 64)
	return p.srv.Typing(chat)
}

func (p *platform) FailNext(n int, f fakeserver.Failure) { p.srv.FailNext(n, f) }

func (p *platform) Len(s string) int { return telegramtest.UTF16Len(s) }

func (p *platform) AddChat(chatID string) {
	chat, _ := strconv.ParseInt(chatID, 10, 64)
	p.srv.AddChat(chat)
}
