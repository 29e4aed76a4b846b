package discord_test

import (
	"sync"
	"testing"
	"unicode/utf8"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
	"gateway/internal/fakeserver"
	"gateway/internal/secret"
)

// platform drives discordtest for the conformance suite.
type platform struct {
	srv *discordtest.Server

	mu     sync.Mutex
	tokens []string
}

func newPlatform(t *testing.T) channeltest.Platform {
	return &platform{srv: discordtest.New(t)}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	channeltest.Run(t, newPlatform)
}

func (p *platform) Features() channeltest.Features {
	return channeltest.Features{
		Edits: true, Typing: true, VoiceIn: true, VoiceOut: true, Groups: true, Threads: true,
		RateLimit: true, Access: true, Tokens: true, MaxLen: discordtest.MaxContent, VoiceMIME: "audio/ogg",
	}
}

func (p *platform) NewChannel(t testing.TB, env channeltest.Env) channels.Channel {
	tok := p.srv.Bot().Token
	if env.BadToken {
		tok = "fake.rejected.0123456789abcdef"
	}
	p.mu.Lock()
	p.tokens = append(p.tokens, tok)
	p.mu.Unlock()
	ch, err := discord.New(discord.Config{Token: secret.Secret(tok), APIURL: p.srv.URL, Access: env.Access},
		discord.Options{Logger: env.Logger, StateDir: env.StateDir, State: env.State})
	if err != nil {
		t.Fatalf("discord.New: %v", err)
	}
	return ch
}

func (p *platform) Secrets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string{p.srv.Bot().Token}, p.tokens...)
}

func (p *platform) Inject(t testing.TB, in channeltest.Inbound) string {
	m := discordtest.Incoming{ID: in.ID, ChannelID: in.ChatID, ThreadID: in.ThreadID, Guild: in.Group,
		AuthorID: in.UserID, Content: in.Text, MentionBot: in.Mention}
	if in.Audio != nil {
		m.Voice = true
		m.Files = []discordtest.File{{Name: "voice-message.ogg", ContentType: in.AudioMIME, Data: in.Audio, DurationSecs: 1.2}}
	}
	return p.srv.Inject(m)
}

func (p *platform) Posted(chatID string) []channeltest.Posted {
	var out []channeltest.Posted
	for _, m := range p.srv.Posted(chatID) {
		ps := channeltest.Posted{ID: m.ID, ChatID: chatID, Text: m.Content, Edits: m.Edits, Time: m.Time}
		if m.ParentID != "" {
			ps.ThreadID = m.ChannelID
		}
		if len(m.Files) == 1 {
			ps.Audio = m.Files[0].Data
			ps.Voice = m.Flags&discordtest.FlagVoiceMessage != 0
		}
		out = append(out, ps)
	}
	return out
}

func (p *platform) Typing(chatID string) int { return p.srv.Typing(chatID) }

func (p *platform) FailNext(n int, f fakeserver.Failure) { p.srv.FailNext(n, f) }

func (p *platform) Len(s string) int { return utf8.RuneCountInString(s) }

func (p *platform) AddChat(chatID string) { p.srv.AddDM(chatID) }
