package discord_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
	"gateway/internal/fakeserver"
	"gateway/internal/secret"
)

const user = "1001"

func defaultAccess() channels.Access {
	return channels.Access{AllowFrom: []string{user}, DMPolicy: channels.DMAllowlist, RequireMention: true}
}

type env struct {
	srv   *discordtest.Server
	ch    *discord.Channel
	sink  *channeltest.Sink
	state string
	logs  *channeltest.LogBuffer
}

// start runs an adapter against srv; cfg's token and api_url default to srv's first bot.
func start(t *testing.T, srv *discordtest.Server, cfg discord.Config) *env {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = secret.Secret(srv.Bot().Token)
	}
	cfg.APIURL = srv.URL
	logs := &channeltest.LogBuffer{}
	state := t.TempDir()
	ch, err := discord.New(cfg, discord.Options{Logger: logs.Logger(), StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the Stop that Start registers: cleanups run last first
		if tok := cfg.Token.Reveal(); strings.Contains(logs.String(), tok) {
			t.Errorf("the token appears in the logs")
		}
	})
	sink := channeltest.NewSink()
	channeltest.Start(t, ch, sink)
	return &env{srv: srv, ch: ch, sink: sink, state: state, logs: logs}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func answer(t *testing.T, ch channels.Channel, target channels.Target, frames ...channels.Frame) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := ch.Open(ctx, target)
	if err != nil {
		return err
	}
	for _, f := range frames {
		if err := st.Send(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

func opsOf(srv *discordtest.Server, op int) []discordtest.Op {
	var out []discordtest.Op
	for _, o := range srv.Ops() {
		if o.Op == op {
			out = append(out, o)
		}
	}
	return out
}

func TestIdentifyIntentsAndHeartbeats(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	srv.SetHeartbeatInterval(200 * time.Millisecond)
	start(t, srv, discord.Config{Access: defaultAccess()})
	ids := opsOf(srv, discordtest.OpIdentify)
	if len(ids) != 1 {
		t.Fatalf("%d IDENTIFY sent; want 1", len(ids))
	}
	want := discordtest.IntentGuildMessages | discordtest.IntentDirectMessages | discordtest.IntentMessageContent
	if ids[0].Intents&want != want {
		t.Errorf("intents %b lack guild messages, DMs or message content (%b)", ids[0].Intents, want)
	}
	waitFor(t, "three heartbeats", func() bool { return len(opsOf(srv, discordtest.OpHeartbeat)) >= 3 })
}

func TestResumeAfterDropReplaysMissedEvents(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	srv.InjectDM("601", user, "before the drop")
	if m := e.sink.Next(t); m.Text() != "before the drop" {
		t.Fatalf("first = %q", m.Text())
	}
	last := srv.Drop()
	// Sent while the socket is down: the fake keeps them for the session.
	srv.InjectDM("601", user, "while down 1")
	srv.InjectDM("601", user, "while down 2")
	for _, want := range []string{"while down 1", "while down 2"} {
		if m := e.sink.Next(t); m.Text() != want {
			t.Fatalf("after the drop got %q; want %q", m.Text(), want)
		}
	}
	e.sink.ExpectNone(t, 500*time.Millisecond)

	resumes := opsOf(srv, discordtest.OpResume)
	if len(resumes) != 1 || !resumes[0].Resumed || resumes[0].Seq != last {
		t.Fatalf("resumes = %+v; want one accepted RESUME with seq %d (the last one sent)", resumes, last)
	}
	if resumes[0].Replayed < 2 {
		t.Errorf("the fake replayed %d events; the two messages should have come by replay", resumes[0].Replayed)
	}
	if n := len(opsOf(srv, discordtest.OpIdentify)); n != 1 {
		t.Errorf("%d IDENTIFY; a resume must not identify again", n)
	}
	h := e.sink.Connections()
	if len(h) != 3 || !h[0].Up || h[1].Up || h[1].Err == nil || !h[2].Up {
		t.Errorf("connection reports = %+v; want up, down with an error, up", h)
	}
	// Still answering after the resume.
	srv.InjectDM("601", user, "after")
	if m := e.sink.Next(t); m.Text() != "after" {
		t.Fatalf("after resume got %q", m.Text())
	}
}

func TestRejectedResumeIdentifiesAgain(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	srv.RejectNextResume()
	srv.Drop()
	waitFor(t, "a second IDENTIFY", func() bool { return len(opsOf(srv, discordtest.OpIdentify)) == 2 })
	var kinds []string
	for _, o := range srv.Ops() {
		switch {
		case o.Op == discordtest.OpIdentify:
			kinds = append(kinds, "identify")
		case o.Op == discordtest.OpResume && o.Resumed:
			kinds = append(kinds, "resumed")
		case o.Op == discordtest.OpResume:
			kinds = append(kinds, "resume-rejected")
		}
	}
	if want := []string{"identify", "resume-rejected", "identify"}; !slices.Equal(kinds, want) {
		t.Fatalf("gateway ops %v; want %v", kinds, want)
	}
	waitFor(t, "the connection reported up again", func() bool {
		h := e.sink.Connections()
		return len(h) >= 3 && h[len(h)-1].Up
	})
	srv.InjectDM("602", user, "new session")
	if m := e.sink.Next(t); m.Text() != "new session" {
		t.Fatalf("got %q", m.Text())
	}
}

func TestBadTokenStartupError(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	const bad = "fake.not-a-real-token.abcdef0123456789"
	ch, err := discord.New(discord.Config{Token: bad, APIURL: srv.URL, Access: defaultAccess()}, discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	err = ch.Start(context.Background(), channeltest.NewSink())
	if err == nil {
		t.Fatal("Start succeeded with a rejected token")
	}
	want := "discord: the bot token was rejected (401); check channels.discord.token"
	if err.Error() != want {
		t.Errorf("error %q; want %q", err, want)
	}
	if strings.Contains(err.Error(), bad) {
		t.Errorf("the error reveals the token")
	}
	if srv.Connected() != 0 || len(opsOf(srv, discordtest.OpIdentify)) != 0 {
		t.Errorf("a gateway connection was made with a rejected token")
	}
}

func TestRevokedTokenStopsReconnecting(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	srv.Revoke(srv.Bot().Token)
	var last channeltest.Connection
	waitFor(t, "a final disconnect report", func() bool {
		h := e.sink.Connections()
		last = h[len(h)-1]
		return !last.Up && last.Err != nil && strings.Contains(last.Err.Error(), "token was rejected")
	})
	n := len(srv.Ops())
	time.Sleep(1500 * time.Millisecond)
	if m := len(srv.Ops()); m != n {
		t.Errorf("the adapter kept trying a revoked token: %d more gateway ops", m-n)
	}
}

func TestBotLoopGuard(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	a, b := srv.Bot(), srv.AddBot("otherbot")
	open := channels.Access{DMPolicy: channels.DMOpen, RequireMention: true}
	ea := start(t, srv, discord.Config{Token: secret.Secret(a.Token), AllowBots: true, Access: open})
	eb := start(t, srv, discord.Config{Token: secret.Secret(b.Token), AllowBots: true, Access: open})

	// Each bot answers whatever reaches it by mentioning the other one.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	responder := func(e *env, other string) {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-e.sink.Messages():
				_ = answer(t, e.ch, channels.TargetOf(m), channels.Frame{Type: channels.FrameDone, Text: "<@" + other + "> what do you think?"})
			}
		}
	}
	wg.Add(2)
	go responder(ea, b.ID)
	go responder(eb, a.ID)

	quiet := func() {
		t.Helper()
		prev, since := -1, time.Now()
		waitFor(t, "the bots to fall silent", func() bool {
			n := len(srv.Posted("700"))
			if n != prev {
				prev, since = n, time.Now()
			}
			return time.Since(since) > 2*time.Second
		})
	}
	srv.InjectGuild("700", user, "talk to each other", true) // mentions bot a
	quiet()
	na, nb := len(srv.PostedBy(a.ID, "700")), len(srv.PostedBy(b.ID, "700"))
	if na != 1+discord.BotStreak || nb != discord.BotStreak {
		t.Fatalf("bot a posted %d, bot b %d; want %d and %d: each takes %d bot messages in a row, then stops",
			na, nb, 1+discord.BotStreak, discord.BotStreak, discord.BotStreak)
	}
	// A human speaking lifts the guard: the bots talk again, and stop again.
	srv.InjectGuild("700", user, "go on", true)
	quiet()
	if n := len(srv.PostedBy(b.ID, "700")); n <= nb || n > 2*discord.BotStreak {
		t.Fatalf("after a human spoke bot b posted %d in all; want more than %d and at most %d", n, nb, 2*discord.BotStreak)
	}
}

func TestBotsIgnoredByDefault(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: channels.Access{DMPolicy: channels.DMOpen, RequireMention: true}})
	srv.Inject(discordtest.Incoming{ChannelID: "701", Guild: true, AuthorID: "5550", AuthorBot: true, MentionBot: true, Content: "I am a bot"})
	srv.InjectGuild("701", user, "I am a person", true)
	if m := e.sink.Next(t); m.Text() != "I am a person" {
		t.Fatalf("delivered %q; another bot's message must be ignored", m.Text())
	}
	e.sink.ExpectNone(t, 300*time.Millisecond)
}

func TestInboundGuildMessages(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	bot := srv.Bot()
	srv.SetRoles(bot.ID, "4242")
	e := start(t, srv, discord.Config{Access: defaultAccess()})

	srv.Inject(discordtest.Incoming{ChannelID: "710", Guild: true, AuthorID: user, Content: "<@!" + bot.ID + "> nickname form", Mentions: []string{bot.ID}})
	if m := e.sink.Next(t); !m.Mentioned || m.Text() != "nickname form" || m.ChatType != channels.ChatGroup || m.ChatID != "710" {
		t.Errorf("<@!id> mention: %+v text %q", m, m.Text())
	}
	srv.Inject(discordtest.Incoming{ChannelID: "710", Guild: true, AuthorID: user, Content: "<@&4242> role call", MentionRoles: []string{"4242"}})
	if m := e.sink.Next(t); !m.Mentioned || m.Text() != "role call" {
		t.Errorf("role mention: mentioned %v text %q", m.Mentioned, m.Text())
	}
	srv.Inject(discordtest.Incoming{ChannelID: "710", Guild: true, AuthorID: user, MentionBot: true, Content: "ask <@2002> about it", Mentions: []string{"2002"}})
	if m := e.sink.Next(t); m.Text() != "ask @User 2002 about it" {
		t.Errorf("other mentions: text %q", m.Text())
	}
	// Some other role, no mention: the gate holds.
	srv.Inject(discordtest.Incoming{ChannelID: "710", Guild: true, AuthorID: user, Content: "<@&77> not us", MentionRoles: []string{"77"}})
	e.sink.ExpectNone(t, 300*time.Millisecond)

	// A reply to the bot passes the mention gate and carries what it answers.
	userMsg := srv.InjectGuild("710", user, "first question", true)
	first := e.sink.Next(t)
	if err := answer(t, e.ch, channels.TargetOf(first), channels.Frame{Type: channels.FrameDone, Text: "first answer"}); err != nil {
		t.Fatal(err)
	}
	posted := srv.PostedBy(bot.ID, "710")
	if len(posted) != 1 || posted[0].ReferenceID != userMsg {
		t.Fatalf("posted %+v; want one answer quoting message %s", posted, userMsg)
	}
	srv.InjectReply("710", user, posted[0].ID, "follow-up without a mention", true)
	m := e.sink.Next(t)
	if m.ReplyTo == nil || !m.ReplyTo.FromBot || m.ReplyTo.ID != posted[0].ID || m.ReplyTo.Text != "first answer" || !m.Mentioned {
		t.Fatalf("reply: %+v (reply_to %+v)", m, m.ReplyTo)
	}

	// Threads: the chat is the parent channel, the thread its own id.
	srv.InjectThread("710", "7777", user, "in the thread", true)
	m = e.sink.Next(t)
	if m.ChatID != "710" || m.ThreadID != "7777" {
		t.Fatalf("thread message chat %q thread %q; want 710 and 7777", m.ChatID, m.ThreadID)
	}
	if err := answer(t, e.ch, channels.TargetOf(m), channels.Frame{Type: channels.FrameDone, Text: "thread answer"}); err != nil {
		t.Fatal(err)
	}
	posted = srv.PostedBy(bot.ID, "710")
	if got := posted[len(posted)-1]; got.ChannelID != "7777" || got.ReferenceID != m.ID {
		t.Errorf("thread answer went to %s quoting %q; want thread 7777 quoting %s", got.ChannelID, got.ReferenceID, m.ID)
	}
}

func TestDMStrangerIsToldWhy(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	for _, text := range []string{"hello?", "hello??", "anyone?"} {
		srv.InjectDM("720", "666", text)
	}
	// The inbox is handled in order: once the allowed user's DM arrives, the stranger's
	// three were handled.
	srv.InjectDM("721", user, "marker")
	if m := e.sink.Next(t); m.Text() != "marker" {
		t.Fatalf("delivered %q from %s", m.Text(), m.UserID)
	}
	waitFor(t, "the not-allowed notice", func() bool { return len(srv.Posted("720")) >= 1 })
	posted := srv.Posted("720")
	if got := posted[0]; got.Content != channels.NotAllowedText("666") || got.ReferenceID != "" {
		t.Errorf("notice %q (reference %q); want the allowlist text, not quoting in a DM", got.Content, got.ReferenceID)
	}
	if len(posted) != 1 {
		t.Errorf("the stranger was told %d times for 3 messages; want once", len(posted))
	}
	e.sink.ExpectNone(t, 200*time.Millisecond)
}

func TestInboundAttachments(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	voice := append([]byte("OggS"), bytes.Repeat([]byte{7}, 3000)...)
	srv.InjectVoice("730", user, voice, 2.5, false)
	m := e.sink.Next(t)
	if !m.IsVoice || len(m.Parts) != 1 {
		t.Fatalf("voice message: %+v", m)
	}
	p := m.Parts[0]
	if p.Type != channels.PartAudio || !p.Voice || p.MIME != "audio/ogg" || p.Duration != 2.5 || p.Size != int64(len(voice)) {
		t.Errorf("voice part %+v", p)
	}
	if !strings.HasPrefix(p.Path, e.state) {
		t.Errorf("voice saved at %s; want under the state dir %s", p.Path, e.state)
	}
	if b, err := os.ReadFile(p.Path); err != nil || !bytes.Equal(b, voice) {
		t.Errorf("saved voice differs (%v)", err)
	}

	srv.Inject(discordtest.Incoming{ChannelID: "730", AuthorID: user, Content: "a song and a picture", Files: []discordtest.File{
		{Name: "song.mp3", ContentType: "audio/mpeg", Data: []byte("ID3 not really")},
		{Name: "../../evil name.png", ContentType: "image/png", Data: []byte("\x89PNG")},
	}})
	m = e.sink.Next(t)
	if m.IsVoice || len(m.Parts) != 3 || m.Text() != "a song and a picture" {
		t.Fatalf("attachments: voice %v parts %+v", m.IsVoice, m.Parts)
	}
	if a := m.Parts[1]; a.Type != channels.PartAudio || a.Voice || a.MIME != "audio/mpeg" || a.Name != "song.mp3" {
		t.Errorf("audio file part %+v", a)
	}
	if img := m.Parts[2]; img.Type != channels.PartImage || filepath.Dir(img.Path) != filepath.Dir(p.Path) {
		t.Errorf("image part %+v; want an image saved next to the others, whatever its name", img)
	}
}

func TestAttachmentOverLimit(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess(), MaxFileBytes: 1000})
	srv.InjectVoice("740", user, bytes.Repeat([]byte{1}, 5000), 3, false)
	waitFor(t, "the too-large reply", func() bool { return len(srv.Posted("740")) == 1 })
	if got := srv.Posted("740")[0].Content; !strings.Contains(got, "too large") {
		t.Errorf("reply %q; want it to say the file is too large", got)
	}
	e.sink.ExpectNone(t, 300*time.Millisecond)
	for _, c := range srv.Calls() {
		if strings.HasPrefix(c.Path, "/attachments/") {
			t.Errorf("the oversized file was downloaded: %s", c.Path)
		}
	}
}

// ogg makes a real Ogg/Opus clip with ffmpeg.
func ogg(t *testing.T, secs string) []byte {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed")
	}
	out := filepath.Join(t.TempDir(), "tone.ogg")
	cmd := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i", "sine=frequency=440:duration="+secs,
		"-af", "volume='if(lt(t,0.5),0.1,1)':eval=frame", "-c:a", "libopus", "-ar", "48000", "-ac", "1", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v: %s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVoiceMessageOut(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	clip := ogg(t, "1.5")
	srv.AddDM("750")
	target := channels.Target{Channel: "discord", ChatID: "750", ChatType: channels.ChatDM}
	err := answer(t, e.ch, target,
		channels.Frame{Type: channels.FrameStart},
		channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartAudio, MIME: "audio/ogg", Data: clip, Voice: true}}},
		channels.Frame{Type: channels.FrameDone})
	if err != nil {
		t.Fatal(err)
	}
	posted := srv.Posted("750")
	if len(posted) != 1 {
		t.Fatalf("posted %d messages; want one voice message", len(posted))
	}
	v := posted[0]
	if v.Flags&discordtest.FlagVoiceMessage == 0 || len(v.Files) != 1 || v.Content != "" {
		t.Fatalf("posted flags %d, %d files, content %q; want a voice message", v.Flags, len(v.Files), v.Content)
	}
	f := v.Files[0]
	if !bytes.Equal(f.Data, clip) || f.ContentType != "audio/ogg" {
		t.Errorf("voice file %s %d bytes; want the clip as audio/ogg", f.ContentType, len(f.Data))
	}
	if f.DurationSecs < 1.3 || f.DurationSecs > 1.7 {
		t.Errorf("duration_secs %v; want about 1.5 (probed)", f.DurationSecs)
	}
	wave, err := base64.StdEncoding.DecodeString(f.Waveform)
	if err != nil || len(wave) < 10 {
		t.Fatalf("waveform %q: %v", f.Waveform, err)
	}
	// The clip is quiet for its first third, then loud: the waveform shows it.
	if wave[0] >= wave[len(wave)-1] || slices.Max(wave) != 255 {
		t.Errorf("waveform %v does not follow the clip's loudness", wave)
	}
	// The payload the fake received is the documented one.
	for _, c := range srv.Calls() {
		if c.Method == "POST" && strings.HasSuffix(c.Path, "/channels/750/messages") {
			var p struct {
				Flags       int `json:"flags"`
				Attachments []struct {
					ID           any     `json:"id"`
					DurationSecs float64 `json:"duration_secs"`
				} `json:"attachments"`
			}
			if err := json.Unmarshal(c.Payload, &p); err != nil || p.Flags != 8192 || len(p.Attachments) != 1 {
				t.Errorf("payload_json %s", c.Payload)
			}
		}
	}
}

func TestVoiceOutConvertsOtherAudio(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed")
	}
	wav := filepath.Join(t.TempDir(), "speech.wav")
	if b, err := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i", "sine=duration=1", wav).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v %s", err, b)
	}
	srv.AddDM("751")
	err := answer(t, e.ch, channels.Target{ChatID: "751", ChatType: channels.ChatDM},
		channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartAudio, MIME: "audio/wav", Path: wav, Voice: true}}},
		channels.Frame{Type: channels.FrameDone})
	if err != nil {
		t.Fatal(err)
	}
	posted := srv.Posted("751")
	if len(posted) != 1 || posted[0].Flags&discordtest.FlagVoiceMessage == 0 || !bytes.HasPrefix(posted[0].Files[0].Data, []byte("OggS")) {
		t.Fatalf("posted %+v; want a WAV voice part sent as an Ogg voice message", posted)
	}
}

func TestStreamingThrottleTypingAndErrors(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv.AddDM("760")
	st, err := e.ch.Open(ctx, channels.Target{ChatID: "760", ChatType: channels.ChatDM})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(ctx, channels.Frame{Type: channels.FrameStart}); err != nil {
		t.Fatal(err)
	}
	if srv.Typing("760") != 1 {
		t.Errorf("typing sent %d times on start; want once, at once", srv.Typing("760"))
	}
	for i := range 25 {
		if err := st.Send(ctx, channels.Frame{Type: channels.FrameDelta, Text: "word" + string(rune('a'+i)) + " "}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := st.Send(ctx, channels.Frame{Type: channels.FrameError, Text: "The model stopped answering."}); err != nil {
		t.Fatal(err)
	}
	posted := srv.Posted("760")
	if len(posted) != 2 || posted[1].Content != "The model stopped answering." {
		t.Fatalf("posted %+v; want the partial answer, then the error text", posted)
	}
	p := posted[0]
	if p.Edits < 1 || !strings.HasPrefix(p.Content, "worda") {
		t.Errorf("partial answer %q with %d edits", p.Content, p.Edits)
	}
	times := append([]time.Time{p.Time}, p.EditTimes...)
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 900*time.Millisecond {
			t.Errorf("edit %d came %v after the previous one; streaming edits are throttled to one a second", i, gap)
		}
	}
	if err := st.Send(ctx, channels.Frame{Type: channels.FrameDelta, Text: "late"}); err == nil {
		t.Errorf("a frame after error was accepted")
	}
}

func TestServerErrorsAreBounded(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	srv.AddDM("770")
	srv.FailNext(100, fakeserver.Failure{})
	err := answer(t, e.ch, channels.Target{ChatID: "770", ChatType: channels.ChatDM}, channels.Frame{Type: channels.FrameDone, Text: "never"})
	if err == nil || !strings.Contains(err.Error(), "500") || !strings.HasPrefix(err.Error(), "discord:") {
		t.Fatalf("error %v; want a discord error naming the 500", err)
	}
	attempts := 0
	for _, c := range srv.Calls() {
		if c.Method == "POST" && strings.HasSuffix(c.Path, "/channels/770/messages") {
			attempts++
		}
	}
	if attempts < 2 || attempts > 5 {
		t.Errorf("%d attempts; want a few retries, bounded", attempts)
	}
	if strings.Contains(err.Error(), srv.Bot().Token) {
		t.Errorf("the error reveals the token")
	}
}

func TestRateLimitWaitsRetryAfter(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	srv.AddDM("771")
	srv.FailNext(2, fakeserver.Failure{RetryAfter: 1200 * time.Millisecond})
	begin := time.Now()
	if err := answer(t, e.ch, channels.Target{ChatID: "771", ChatType: channels.ChatDM}, channels.Frame{Type: channels.FrameDone, Text: "patient"}); err != nil {
		t.Fatal(err)
	}
	posted := srv.Posted("771")
	if len(posted) != 1 || posted[0].Time.Sub(begin) < 2400*time.Millisecond {
		t.Fatalf("posted %+v after %v; want one message, after two retry_after waits", posted, time.Since(begin))
	}
}

func TestStopIsPromptAndDisconnects(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	ch, err := discord.New(discord.Config{Token: secret.Secret(srv.Bot().Token), APIURL: srv.URL, Access: defaultAccess()}, discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(context.Background(), channeltest.NewSink()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ch.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ch.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	waitFor(t, "the fake to see the socket closed", func() bool { return srv.Connected() == 0 })
	if _, err := ch.Open(ctx, channels.Target{ChatID: "1"}); err == nil {
		t.Errorf("Open after Stop succeeded")
	}
	if err := ch.Start(ctx, channeltest.NewSink()); err == nil {
		t.Errorf("Start after Stop succeeded")
	}
}

func TestStartHonoursContext(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	ch, err := discord.New(discord.Config{Token: secret.Secret(srv.Bot().Token), APIURL: srv.URL}, discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ch.Start(ctx, channeltest.NewSink()); err == nil {
		t.Fatal("Start with a cancelled context succeeded")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := discord.Config{Enabled: true, Token: "abc.def", Access: defaultAccess()}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if err := (discord.Config{}).Validate(); err != nil {
		t.Errorf("disabled empty config: %v", err)
	}
	cases := []struct {
		mod func(*discord.Config)
		key string
	}{
		{func(c *discord.Config) { c.Token = "" }, "channels.discord.token"},
		{func(c *discord.Config) { c.Token = "two words" }, "channels.discord.token"},
		{func(c *discord.Config) { c.APIURL = "127.0.0.1:8080" }, "channels.discord.api_url"},
		{func(c *discord.Config) { c.APIURL = "ftp://x" }, "channels.discord.api_url"},
		{func(c *discord.Config) { c.MaxFileBytes = -1 }, "channels.discord.max_file_bytes"},
		{func(c *discord.Config) { c.DMPolicy = "everyone" }, "channels.discord.dm_policy"},
		{func(c *discord.Config) { c.AllowFrom = []string{"1001", "@alice"} }, "channels.discord.allow_from[1]"},
	}
	for _, c := range cases {
		cfg := ok
		c.mod(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("config %+v: error %v; want one naming %s", cfg, err, c.key)
		}
		if err != nil && strings.Contains(err.Error(), "two words") {
			t.Errorf("the error reveals the token: %v", err)
		}
	}
	if _, err := discord.New(discord.Config{}, discord.Options{}); err == nil || !strings.Contains(err.Error(), "channels.discord.token") {
		t.Errorf("New without a token: %v", err)
	}
}

func TestStartGivesUpOnAHungGateway(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	srv.StallGateway(true)
	ch, err := discord.New(discord.Config{Token: secret.Secret(srv.Bot().Token), APIURL: srv.URL}, discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = ch.Start(ctx, channeltest.NewSink())
	if err == nil || !strings.HasPrefix(err.Error(), "discord: cannot connect to the gateway") {
		t.Fatalf("Start against a silent gateway: %v", err)
	}
	if err := ch.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// An answer sent again for the same message, as when a journaled message is answered a
// second time after a crash between the answer's last send and its settling, is not posted
// twice: Discord (enforce_nonce) returns the messages the first answer made, and they show
// the second answer. A notice to the same message (the transcript of a voice note) stays a
// message of its own.
func TestReplayedAnswerIsPostedOnce(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	srv.InjectDM("780", user, "tell me a long story")
	target := channels.TargetOf(e.sink.Next(t))
	long := strings.Repeat("once upon a time ", 150) // two messages at Discord's 2000 characters
	send := func(text string) {
		t.Helper()
		if err := answer(t, e.ch, target, channels.Frame{Type: channels.FrameDone, Text: "🎤 tell me a long story"}); err != nil {
			t.Fatal(err)
		}
		err := answer(t, e.ch, target,
			channels.Frame{Type: channels.FrameStart},
			channels.Frame{Type: channels.FrameDelta, Text: text[:100]}, // a preview, posted at once
			channels.Frame{Type: channels.FrameDelta, Text: text[100:]},
			channels.Frame{Type: channels.FrameDone})
		if err != nil {
			t.Fatal(err)
		}
	}
	send(long + "The end.")
	first := srv.Posted("780")
	if len(first) != 3 {
		t.Fatalf("the first answer posted %d messages; want the transcript and two for the story", len(first))
	}
	send(long + "And they lived happily ever after.") // answered again: the model's words differ
	got := srv.Posted("780")
	if len(got) != 3 {
		t.Fatalf("%d messages after the answer was sent again; want the 3 of the first time", len(got))
	}
	for i := range got {
		if got[i].ID != first[i].ID {
			t.Errorf("message %d is %s; want %s, the one posted the first time", i, got[i].ID, first[i].ID)
		}
	}
	if got[0].Content != "🎤 tell me a long story" {
		t.Errorf("the transcript reads %q", got[0].Content)
	}
	if story := got[1].Content + got[2].Content; !strings.HasSuffix(strings.TrimSpace(story), "And they lived happily ever after.") {
		t.Errorf("the story ends %q; want the answer sent last", story[max(len(story)-60, 0):])
	}
}

// Telling a stranger that they are not allowed is a send like any other, and may wait on
// a rate limit: meanwhile the messages of other chats are taken at once.
func TestStrangersNoticeHoldsUpNoOtherChat(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	srv.FailNext(1, fakeserver.Failure{Method: "createMessage", Chat: "720", RetryAfter: 5 * time.Second})
	srv.InjectDM("720", "666", "hello?")
	srv.InjectDM("721", user, "my own question")
	if m := e.sink.Next(t); m.Text() != "my own question" {
		t.Fatalf("delivered %q", m.Text())
	}
	if n := len(srv.Posted("720")); n != 0 {
		t.Fatalf("the allowed user's message was taken only after the stranger's notice went out (%d posted)", n)
	}
	waitFor(t, "the notice after the rate limit", func() bool { return len(srv.Posted("720")) == 1 })
}
