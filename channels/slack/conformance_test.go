package slack

import (
	"strings"
	"testing"
	"unicode/utf8"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/slack/slacktest"
	"gateway/internal/fakeserver"
	"gateway/internal/secret"
)

const rejectedToken = "xoxb-9999-rejected-token-value"

type platform struct {
	s *slacktest.Server
}

func (p *platform) Features() channeltest.Features {
	return channeltest.Features{
		Edits: true, Typing: true, VoiceIn: true, VoiceOut: true, Groups: true, Threads: true,
		RateLimit: true, Access: true, Tokens: true, MaxLen: MaxTextLen, VoiceMIME: "audio/ogg",
	}
}

func (p *platform) NewChannel(t testing.TB, env channeltest.Env) channels.Channel {
	cfg := fakeConfig(p.s)
	cfg.Access = env.Access
	if env.BadToken {
		cfg.BotToken = rejectedToken
	}
	ch, err := New(cfg, Options{Logger: env.Logger, StateDir: env.StateDir, State: env.State})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func fakeConfig(s *slacktest.Server) Config {
	return Config{
		Enabled:  true,
		BotToken: secret.Secret(slacktest.BotToken),
		AppToken: secret.Secret(slacktest.AppToken),
		APIURL:   s.APIURL(),
	}
}

func (p *platform) Secrets() []string {
	return []string{slacktest.BotToken, slacktest.AppToken, slacktest.SigningSecret, rejectedToken}
}

func (p *platform) Inject(t testing.TB, in channeltest.Inbound) string {
	m := slacktest.UserMessage{
		Channel: in.ChatID, ChannelType: "im", User: in.UserID, Text: in.Text,
		ThreadTS: in.ThreadID, TS: in.ID, Mention: in.Mention,
	}
	if in.Group {
		m.ChannelType = "channel"
	}
	if in.Audio != nil {
		m.Files = []slacktest.UserFile{{Name: "audio_message.ogg", MIME: in.AudioMIME, Data: in.Audio, AudioClip: true}}
	}
	return p.s.Send(m)
}

func (p *platform) Posted(chatID string) []channeltest.Posted {
	var out []channeltest.Posted
	for _, m := range p.s.Posted(chatID) {
		cp := channeltest.Posted{ID: m.TS, ChatID: m.Channel, ThreadID: m.ThreadTS, Text: m.Text, Edits: m.Edits, Time: m.Time}
		for _, f := range m.Files {
			if strings.HasPrefix(f.MIME, "audio/") {
				// An audio file in the thread is Slack's nearest to a voice note.
				cp.Audio, cp.Voice = f.Data, true
			}
		}
		out = append(out, cp)
	}
	return out
}

func (p *platform) Typing(chatID string) int { return p.s.Typing(chatID) }

func (p *platform) FailNext(n int, f fakeserver.Failure) { p.s.FailNext(n, f) }

func (p *platform) Len(s string) int { return utf8.RuneCountInString(s) }

func TestConformance(t *testing.T) {
	channeltest.Run(t, func(t *testing.T) channeltest.Platform {
		return &platform{s: slacktest.New(t)}
	})
}

func (p *platform) AddChat(chatID string) { p.s.AddChannel(chatID) }
