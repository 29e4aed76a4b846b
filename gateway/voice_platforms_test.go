package gateway

import (
	"strings"
	"testing"
	"time"

	"gateway/builtins/voicetest"
	"gateway/channels"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
	"gateway/channels/slack"
	"gateway/channels/slack/slacktest"
	"gateway/internal/secret"
)

var voiceAccess = channels.Access{AllowFrom: []string{"4242"}, DMPolicy: channels.DMAllowlist, RequireMention: true}

// waitFor polls until found returns the audio bytes of a voice reply (and that a text reply exists).
func waitFor(t *testing.T, what string, found func() ([]byte, bool)) []byte {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, ok := found(); ok {
			return b
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %s within 30s", what)
	return nil
}

func assertHeard(t *testing.T, e *testEnv) {
	t.Helper()
	reqs := e.fake.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model was not called")
	}
	heard := strings.ToLower(lastUser(reqs[0]))
	if !strings.Contains(heard, "kitchen") || !strings.Contains(heard, "lights") {
		t.Fatalf("the model received %q; want the spoken words", heard)
	}
}

// TestVoiceRoundTripOnDiscord: a Discord voice message in, a native voice message out.
func TestVoiceRoundTripOnDiscord(t *testing.T) {
	srv := discordtest.New(t)
	ch, err := discord.New(discord.Config{Enabled: true, Token: secret.Secret(srv.Bot().Token), APIURL: srv.URL, Access: voiceAccess},
		discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, t.TempDir(), []channels.Channel{ch}, localVoice(t))
	srv.InjectVoice("dm-1", "4242", voicetest.SpeakOgg(t, spoken), 2.5, false)
	voice := waitFor(t, "discord voice message", func() ([]byte, bool) {
		var audio []byte
		text := false
		for _, m := range srv.Posted("dm-1") {
			if m.Flags&8192 != 0 && len(m.Files) == 1 && m.Files[0].DurationSecs > 0 && m.Files[0].Waveform != "" {
				audio = m.Files[0].Data
			} else if m.Content != "" {
				text = true
			}
		}
		return audio, audio != nil && text
	})
	assertHeard(t, e)
	assertPlayableOpus(t, voice)
}

// TestVoiceRoundTripOnSlack: a Slack audio clip in, an audio file uploaded into the thread out.
func TestVoiceRoundTripOnSlack(t *testing.T) {
	srv := slacktest.New(t)
	ch, err := slack.New(slack.Config{Enabled: true, BotToken: secret.Secret(slacktest.BotToken), AppToken: secret.Secret(slacktest.AppToken),
		APIURL: srv.APIURL(), Access: voiceAccess}, slack.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, t.TempDir(), []channels.Channel{ch}, localVoice(t))
	srv.AudioClip("D4242", "4242", voicetest.SpeakOgg(t, spoken), "audio/ogg")
	voice := waitFor(t, "slack audio reply", func() ([]byte, bool) {
		var audio []byte
		text := false
		for _, p := range srv.Posted("D4242") {
			for _, f := range p.Files {
				if strings.HasPrefix(f.MIME, "audio/") {
					audio = f.Data
				}
			}
			if p.Text != "" {
				text = true
			}
		}
		return audio, audio != nil && text
	})
	assertHeard(t, e)
	assertPlayableOpus(t, voice)
}
