package stt_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gateway/builtins/stt"
	"gateway/builtins/voicetest"
	"gateway/channels"
	"gateway/hooks"
	"gateway/internal/audio"
	"gateway/internal/fakeserver"
	"gateway/internal/secret"
)

const phrase = "please turn on the kitchen lights"

var phrases = []string{phrase, "what is the weather today", "play some music", "set a timer for ten minutes"}

// setup registers s on a fresh bus, the way the gateway does.
func setup(t testing.TB, cfg stt.Config, opts stt.Options) *hooks.Bus {
	t.Helper()
	if opts.TempDir == "" {
		opts.TempDir = t.TempDir()
	}
	s, err := stt.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	bus := hooks.NewBus(hooks.Options{})
	scope := bus.Scope(stt.Source)
	s.Register(scope)
	t.Cleanup(scope.Close)
	return bus
}

func voiceNote(path string) *hooks.MessageReceive {
	return &hooks.MessageReceive{
		Session: hooks.Session{Channel: "test", ChatID: "1", UserID: "42"},
		Parts:   []channels.Part{{Type: channels.PartAudio, MIME: "audio/ogg", Path: path, Voice: true}},
		IsVoice: true,
	}
}

func commandConfig(t testing.TB) stt.Config {
	return stt.Config{
		Enabled:  true,
		Provider: "command",
		Command:  voicetest.PocketsphinxCommand(voicetest.Grammar(t, phrases...)),
	}
}

func openaiConfig(srv *voicetest.Server) stt.Config {
	return stt.Config{Enabled: true, Provider: "openai", BaseURL: srv.URL(), APIKey: "sk-test", Language: "en"}
}

func needSpeechTools(t testing.TB) {
	voicetest.RequireTools(t, "ffmpeg", "ffprobe", "espeak-ng")
}

func audioParts(ps []channels.Part) int {
	n := 0
	for _, p := range ps {
		if p.Type == channels.PartAudio {
			n++
		}
	}
	return n
}

// A spoken voice note reaches the agent as its words, through the real recogniser.
func TestCommandProviderTranscribesSpokenVoiceNote(t *testing.T) {
	needSpeechTools(t)
	voicetest.RequireTools(t, "pocketsphinx_continuous")
	bus := setup(t, commandConfig(t), stt.Options{})

	ev := voiceNote(voicetest.WriteFile(t, "voice.ogg", voicetest.SpeakOgg(t, phrase)))
	ev.Parts = append([]channels.Part{channels.TextPart("caption")}, ev.Parts...)
	if rej := bus.Receive(t.Context(), ev); rej != nil {
		t.Fatalf("rejected: %s", rej.Reason)
	}
	if !strings.Contains(ev.Text, "kitchen") || !strings.Contains(ev.Text, "lights") {
		t.Fatalf("transcript %q lacks the spoken words", ev.Text)
	}
	if !strings.HasPrefix(ev.Text, "caption\n") {
		t.Errorf("the caption did not stay first: %q", ev.Text)
	}
	if n := audioParts(ev.Parts); n != 0 {
		t.Errorf("%d audio parts left after transcription", n)
	}
	if !ev.IsVoice {
		t.Error("is_voice was lost: the reply would not be spoken")
	}
}

func TestCommandProviderSilenceIsRejected(t *testing.T) {
	voicetest.RequireTools(t, "ffmpeg", "ffprobe", "pocketsphinx_continuous")
	bus := setup(t, commandConfig(t), stt.Options{})
	ev := voiceNote(voicetest.WriteFile(t, "silence.wav", voicetest.SilenceWAV(2*time.Second)))
	rej := bus.Receive(t.Context(), ev)
	if rej == nil || rej.Reason != "I couldn't transcribe your voice note: I could not hear any words in it." {
		t.Fatalf("silence: reject = %+v", rej)
	}
}

func TestCommandProviderFailureIsRejected(t *testing.T) {
	needSpeechTools(t)
	bus := setup(t, stt.Config{Enabled: true, Provider: "command",
		Command: []string{"sh", "-c", "echo model not found >&2; exit 2", "{input}"}}, stt.Options{})
	ev := voiceNote(voicetest.WriteFile(t, "voice.ogg", voicetest.SpeakOgg(t, "hello")))
	rej := bus.Receive(t.Context(), ev)
	if rej == nil || !strings.Contains(rej.Reason, "the speech recognizer failed") {
		t.Fatalf("reject = %+v", rej)
	}

	bus = setup(t, stt.Config{Enabled: true, Provider: "command", Timeout: 300 * time.Millisecond,
		Command: []string{"sh", "-c", "sleep 30", "{input}"}}, stt.Options{})
	rej = bus.Receive(t.Context(), voiceNote(ev.Parts[0].Path))
	if rej == nil || !strings.Contains(rej.Reason, "did not answer in time") {
		t.Fatalf("reject = %+v", rej)
	}
}

// Of a message with more than its audio, the audio that failed is left out rather than the
// message: the rest goes on with a note in the audio's place, the user told why (once per
// recording), and the answer is not spoken for what was not heard.
func TestFailedAudioBesideTextIsLeftOutWithANotice(t *testing.T) {
	needSpeechTools(t)
	bus := setup(t, stt.Config{Enabled: true, Provider: "command",
		Command: []string{"sh", "-c", "exit 2", "{input}"}}, stt.Options{})
	ogg := voicetest.WriteFile(t, "voice.ogg", voicetest.SpeakOgg(t, "hello"))
	ev := voiceNote(ogg)
	ev.Parts = append([]channels.Part{channels.TextPart("caption")}, ev.Parts...)
	ev.Parts = append(ev.Parts, channels.Part{Type: channels.PartAudio, MIME: "audio/ogg", Path: ogg, Name: "memo.ogg"})
	if rej := bus.Receive(t.Context(), ev); rej != nil {
		t.Fatalf("rejected: %s", rej.Reason)
	}
	want := "caption\n[The user also sent a voice note, which could not be transcribed]\n[The user also sent an audio file (memo.ogg), which could not be transcribed]"
	if ev.Text != want || audioParts(ev.Parts) != 0 || ev.IsVoice {
		t.Fatalf("the message went on as %q (voice %v); want %q, not voice", ev.Text, ev.IsVoice, want)
	}
	notice := "I couldn't transcribe your voice note: the speech recognizer failed.\n" +
		"I couldn't transcribe your audio file: the speech recognizer failed. I'll answer the rest of your message without them."
	if len(ev.Notices) != 1 || ev.Notices[0] != notice {
		t.Fatalf("notices %q; want %q", ev.Notices, notice)
	}
}

// The command gets what input_format promises: 16 kHz mono 16-bit WAV by default.
func TestCommandProviderGetsWAV16k(t *testing.T) {
	needSpeechTools(t)
	dir := t.TempDir()
	bus := setup(t, stt.Config{Enabled: true, Provider: "command",
		Command: []string{"cp", "{input}", dir + "/got.wav"}}, stt.Options{})
	bus.Receive(t.Context(), voiceNote(voicetest.WriteFile(t, "voice.ogg", voicetest.SpeakOgg(t, "hello"))))
	info, err := audio.Probe(t.Context(), dir+"/got.wav")
	if err != nil {
		t.Fatal(err)
	}
	if info.Format != "wav" || info.Codec != "pcm_s16le" || info.SampleRate != 16000 || info.Channels != 1 {
		t.Fatalf("the command got %+v", info)
	}
}

func TestOpenAIProviderSendsVoiceNoteAsIs(t *testing.T) {
	needSpeechTools(t)
	srv := voicetest.NewServer(t)
	srv.RequireKey("sk-test")
	srv.SetTranscript(" Turn on the kitchen lights. ")
	bus := setup(t, openaiConfig(srv), stt.Options{})

	ogg := voicetest.SpeakOgg(t, phrase)
	ev := voiceNote(voicetest.WriteFile(t, "file_17.oga", ogg))
	ev.Language = "de" // the profile's language wins over stt.language
	if rej := bus.Receive(t.Context(), ev); rej != nil {
		t.Fatalf("rejected: %s", rej.Reason)
	}
	if ev.Text != "Turn on the kitchen lights." || !ev.IsVoice || len(ev.Parts) != 1 {
		t.Fatalf("after STT: text %q, voice %v, parts %+v", ev.Text, ev.IsVoice, ev.Parts)
	}
	ups := srv.Uploads()
	if len(ups) != 1 {
		t.Fatalf("%d uploads, want 1", len(ups))
	}
	u := ups[0]
	if !bytes.Equal(u.Data, ogg) || u.Filename != "voice.ogg" || u.Model != "whisper-1" || u.Language != "de" {
		t.Fatalf("upload: file %q (%d bytes, same=%v), model %q, language %q",
			u.Filename, len(u.Data), bytes.Equal(u.Data, ogg), u.Model, u.Language)
	}
}

func TestOpenAIProviderConvertsOtherFormats(t *testing.T) {
	needSpeechTools(t)
	srv := voicetest.NewServer(t)
	bus := setup(t, openaiConfig(srv), stt.Options{})
	aiff := voicetest.Encode(t, voicetest.SpeakWAV(t, phrase), "aiff")
	ev := voiceNote(voicetest.WriteFile(t, "voice.aiff", aiff))
	if rej := bus.Receive(t.Context(), ev); rej != nil {
		t.Fatalf("rejected: %s", rej.Reason)
	}
	ups := srv.Uploads()
	if len(ups) != 1 || ups[0].Filename != "voice.ogg" || !audio.IsOggOpus(ups[0].Data) {
		t.Fatalf("AIFF was not sent as Ogg/Opus: %d uploads", len(ups))
	}
	if ev.Text != voicetest.DefaultTranscript {
		t.Fatalf("text %q", ev.Text)
	}
}

// A Telegram video note is a round video of someone speaking: only its sound is sent.
func TestOpenAIProviderSendsOnlyTheSoundOfAVideoNote(t *testing.T) {
	needSpeechTools(t)
	srv := voicetest.NewServer(t)
	bus := setup(t, openaiConfig(srv), stt.Options{})
	wav := voicetest.WriteFile(t, "speech.wav", voicetest.SpeakWAV(t, phrase))
	mp4 := filepath.Join(t.TempDir(), "note.mp4")
	if _, err := audio.Run(t.Context(), audio.Cmd{Argv: []string{"ffmpeg", "-nostdin", "-v", "error",
		"-f", "lavfi", "-i", "color=c=blue:s=64x64:r=10", "-i", "file:" + wav,
		"-shortest", "-c:v", "mpeg4", "-c:a", "aac", "-f", "mp4", "file:" + mp4}}); err != nil {
		t.Fatal(err)
	}
	ev := voiceNote(mp4)
	ev.Parts[0].MIME = "video/mp4"
	if rej := bus.Receive(t.Context(), ev); rej != nil {
		t.Fatalf("rejected: %s", rej.Reason)
	}
	ups := srv.Uploads()
	if len(ups) != 1 || !audio.IsOggOpus(ups[0].Data) {
		t.Fatalf("the video note was not sent as Ogg/Opus sound (%d uploads)", len(ups))
	}
}

func TestBadAudioIsRejectedWithAReason(t *testing.T) {
	needSpeechTools(t)
	srv := voicetest.NewServer(t)
	speech := voicetest.SpeakOgg(t, phrase) // about 2 seconds
	info, err := audio.Probe(t.Context(), voicetest.WriteFile(t, "speech.ogg", speech))
	if err != nil {
		t.Fatal(err)
	}
	secs := int((info.Duration + time.Second - 1) / time.Second) // measured lengths round up
	var pngBuf bytes.Buffer
	_ = png.Encode(&pngBuf, image.NewGray(image.Rect(0, 0, 8, 8)))
	rnd := make([]byte, 4096)
	for i := range rnd {
		rnd[i] = byte(rand.N(256))
	}

	cases := []struct {
		name   string
		data   []byte
		voice  bool
		tweak  func(*stt.Config)
		reason string
	}{
		{"oversized", speech, true, func(c *stt.Config) { c.MaxBytes = 2000 },
			fmt.Sprintf("I couldn't transcribe your voice note: it is %d KB and the limit is 2 KB.", len(speech)/1000)},
		{"too long", speech, true, func(c *stt.Config) { c.MaxDuration = time.Second },
			fmt.Sprintf("I couldn't transcribe your voice note: it is %d seconds long and the limit is 1 second.", secs)},
		{"empty", nil, true, nil, "I couldn't transcribe your voice note: the audio file is empty."},
		{"corrupt", rnd, false, nil,
			"I couldn't transcribe your audio file: the file is damaged or not in an audio format I can read."},
		{"an image named audio", pngBuf.Bytes(), true, nil,
			"I couldn't transcribe your voice note: the file is not audio (it looks like a PNG image)."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := openaiConfig(srv)
			if c.tweak != nil {
				c.tweak(&cfg)
			}
			bus := setup(t, cfg, stt.Options{})
			ev := voiceNote(voicetest.WriteFile(t, "voice.ogg", c.data))
			ev.Parts[0].Voice = c.voice
			before := srv.Requests()
			rej := bus.Receive(t.Context(), ev)
			if rej == nil {
				t.Fatalf("not rejected; text %q", ev.Text)
			}
			if rej.Reason != c.reason {
				t.Fatalf("reason %q\n      want %q", rej.Reason, c.reason)
			}
			if srv.Requests() != before {
				t.Error("bad audio was sent to the speech service")
			}
		})
	}
}

func TestProviderTroubleIsRejectedWithAReason(t *testing.T) {
	needSpeechTools(t)
	srv := voicetest.NewServer(t)
	path := voicetest.WriteFile(t, "voice.ogg", voicetest.SpeakOgg(t, "hello"))

	t.Run("down", func(t *testing.T) {
		bus := setup(t, openaiConfig(srv), stt.Options{})
		srv.FailNext(2, fakeserver.Failure{Status: 503})
		before := srv.Requests()
		rej := bus.Receive(t.Context(), voiceNote(path))
		if rej == nil || rej.Reason != "I couldn't transcribe your voice note: the speech service is not available right now; please try again later." {
			t.Fatalf("reject = %+v", rej)
		}
		if n := srv.Requests() - before; n != 2 {
			t.Fatalf("%d attempts, want 2 (one retry)", n)
		}
	})
	t.Run("recovers on retry", func(t *testing.T) {
		bus := setup(t, openaiConfig(srv), stt.Options{})
		srv.FailNext(1, fakeserver.Failure{Status: 500})
		before := srv.Requests()
		ev := voiceNote(path)
		if rej := bus.Receive(t.Context(), ev); rej != nil || ev.Text != voicetest.DefaultTranscript {
			t.Fatalf("reject = %+v, text %q", rej, ev.Text)
		}
		if n := srv.Requests() - before; n != 2 {
			t.Fatalf("%d attempts, want 2", n)
		}
	})
	t.Run("slow", func(t *testing.T) {
		cfg := openaiConfig(srv)
		cfg.Timeout = 300 * time.Millisecond
		bus := setup(t, cfg, stt.Options{})
		srv.SetDelay(time.Minute)
		defer srv.SetDelay(0)
		rej := bus.Receive(t.Context(), voiceNote(path))
		if rej == nil || rej.Reason != "I couldn't transcribe your voice note: the speech service did not answer in time." {
			t.Fatalf("reject = %+v", rej)
		}
	})
	t.Run("no words", func(t *testing.T) {
		bus := setup(t, openaiConfig(srv), stt.Options{})
		srv.SetTranscript("  \n")
		defer srv.SetTranscript(voicetest.DefaultTranscript)
		rej := bus.Receive(t.Context(), voiceNote(path))
		if rej == nil || rej.Reason != "I couldn't transcribe your voice note: I could not hear any words in it." {
			t.Fatalf("reject = %+v", rej)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		cfg := openaiConfig(srv)
		cfg.BaseURL = "http://127.0.0.1:1/v1"
		bus := setup(t, cfg, stt.Options{})
		rej := bus.Receive(t.Context(), voiceNote(path))
		if rej == nil || !strings.Contains(rej.Reason, "could not be reached") {
			t.Fatalf("reject = %+v", rej)
		}
	})
}

// A wrong key must not show up in what the user sees nor in the logs.
func TestAPIKeyStaysSecret(t *testing.T) {
	needSpeechTools(t)
	srv := voicetest.NewServer(t)
	srv.RequireKey("sk-right")
	var logs bytes.Buffer
	cfg := openaiConfig(srv)
	cfg.APIKey = secret.Secret("sk-wrong-0123456789")
	bus := setup(t, cfg, stt.Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	rej := bus.Receive(t.Context(), voiceNote(voicetest.WriteFile(t, "v.ogg", voicetest.SpeakOgg(t, "hi"))))
	if rej == nil || !strings.Contains(rej.Reason, "refused") {
		t.Fatalf("reject = %+v", rej)
	}
	if strings.Contains(rej.Reason+logs.String(), "0123456789") {
		t.Fatalf("the API key leaked:\n%s\n%s", rej.Reason, logs.String())
	}
	if !strings.Contains(logs.String(), "401") {
		t.Errorf("the log does not tell the admin what went wrong:\n%s", logs.String())
	}
}

func TestMessagesWithoutAudioPassUntouched(t *testing.T) {
	needSpeechTools(t)
	srv := voicetest.NewServer(t)
	bus := setup(t, openaiConfig(srv), stt.Options{})
	img := channels.Part{Type: channels.PartImage, Path: "/nonexistent.png"}
	ev := &hooks.MessageReceive{Parts: []channels.Part{channels.TextPart("hi"), img}}
	if rej := bus.Receive(t.Context(), ev); rej != nil {
		t.Fatal(rej.Reason)
	}
	if ev.Text != "hi" || len(ev.Parts) != 2 || ev.IsVoice || srv.Requests() != 0 {
		t.Fatalf("text message changed: %+v, voice %v, %d requests", ev.Parts, ev.IsVoice, srv.Requests())
	}
}

func TestTooManyAudioPartsRejected(t *testing.T) {
	needSpeechTools(t)
	srv := voicetest.NewServer(t)
	bus := setup(t, openaiConfig(srv), stt.Options{})
	ev := &hooks.MessageReceive{}
	for range 5 {
		ev.Parts = append(ev.Parts, channels.Part{Type: channels.PartAudio, Path: "/x.ogg"})
	}
	rej := bus.Receive(t.Context(), ev)
	if rej == nil || !strings.Contains(rej.Reason, "at most 4") || srv.Requests() != 0 {
		t.Fatalf("reject = %+v", rej)
	}
}

func TestDataPartsAreTranscribed(t *testing.T) {
	needSpeechTools(t)
	srv := voicetest.NewServer(t)
	bus := setup(t, openaiConfig(srv), stt.Options{})
	ogg := voicetest.SpeakOgg(t, "hi")
	ev := &hooks.MessageReceive{Parts: []channels.Part{{Type: channels.PartAudio, Data: ogg}}}
	if rej := bus.Receive(t.Context(), ev); rej != nil || ev.Text != voicetest.DefaultTranscript {
		t.Fatalf("reject %+v, text %q", rej, ev.Text)
	}
	if ev.IsVoice {
		t.Error("an audio file that is not a voice note made the message voice")
	}
}

func TestNewChecksTheCommandExists(t *testing.T) {
	voicetest.RequireTools(t, "ffmpeg", "ffprobe")
	_, err := stt.New(stt.Config{Enabled: true, Provider: "command",
		Command: []string{"no-such-recognizer-xyz", "{input}"}}, stt.Options{})
	if err == nil || !strings.Contains(err.Error(), `"no-such-recognizer-xyz" not found`) {
		t.Fatalf("New = %v, want a missing-program error naming it", err)
	}

	t.Setenv("PATH", t.TempDir())
	_, err = stt.New(stt.Config{Enabled: true, Provider: "command",
		Command: []string{"pocketsphinx_continuous", "{input}"}}, stt.Options{})
	for _, want := range []string{"apt-get install ffmpeg", "apt-get install pocketsphinx"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New without tools = %v, want a hint %q", err, want)
		}
	}
}

func TestDisabledRegistersNothing(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no tools needed when disabled
	s, err := stt.New(stt.Config{Enabled: false, Provider: "nonsense"}, stt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bus := hooks.NewBus(hooks.Options{})
	s.Register(bus.Scope(stt.Source))
	if h := bus.Handlers(); len(h) != 0 {
		t.Fatalf("disabled STT registered %v", h)
	}
}

func TestValidateNamesTheKey(t *testing.T) {
	cases := []struct {
		cfg  stt.Config
		want string // "" = valid
	}{
		{stt.DefaultConfig(), ""},
		{stt.Config{Enabled: true}, ""},
		{stt.Config{Enabled: true, Provider: "command", Command: []string{"x", "{input}"}, InputFormat: "ogg"}, ""},
		{stt.Config{Enabled: true, Provider: "whisper"}, `stt.provider: "whisper" is not a provider`},
		{stt.Config{Enabled: true, Provider: "command"}, "stt.command: is required"},
		{stt.Config{Enabled: true, Provider: "command", Command: []string{"x", "file.wav"}}, "stt.command: must contain {input}"},
		{stt.Config{Enabled: true, Command: []string{"x"}}, "stt.command: is only used with provider: command"},
		{stt.Config{Enabled: true, BaseURL: "localhost:8000"}, "stt.base_url:"},
		{stt.Config{Enabled: true, InputFormat: "mp3"}, `stt.input_format: "mp3" is not a format`},
		{stt.Config{Enabled: true, MaxBytes: -1}, "stt.max_bytes:"},
		{stt.Config{Enabled: true, MaxDuration: -time.Second}, "stt.max_duration:"},
		{stt.Config{Enabled: true, Timeout: -time.Second}, "stt.timeout:"},
		{stt.Config{Enabled: false, Provider: "whisper"}, ""},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("Validate(%+v) = %v, want ok", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("Validate(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// The STT handler adds probing (and, for command providers, conversion to WAV) to each
// voice note; these measure that overhead with providers that answer at once.
func BenchmarkOverheadOpenAI(b *testing.B) {
	needSpeechTools(b)
	srv := voicetest.NewServer(b)
	benchReceive(b, setup(b, openaiConfig(srv), stt.Options{}))
}

func BenchmarkOverheadCommandWAV(b *testing.B) {
	needSpeechTools(b)
	benchReceive(b, setup(b, stt.Config{Enabled: true, Provider: "command",
		Command: []string{"echo", "hello", "{input}"}}, stt.Options{}))
}

func benchReceive(b *testing.B, bus *hooks.Bus) {
	path := voicetest.WriteFile(b, "voice.ogg", voicetest.SpeakOgg(b, phrase))
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if rej := bus.Receive(ctx, voiceNote(path)); rej != nil {
			b.Fatal(rej.Reason)
		}
	}
}

// The speech client is made from the config alone: the OpenAI SDK's own reading of the
// environment would send OPENAI_API_KEY (and OPENAI_CUSTOM_HEADERS) to a local Whisper
// server that base_url names, and OPENAI_BASE_URL would send the audio elsewhere.
func TestOpenAIProviderIgnoresTheSDKsEnvironment(t *testing.T) {
	needSpeechTools(t)
	t.Setenv("OPENAI_API_KEY", "sk-from-the-environment")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Leak: yes")
	t.Setenv("OPENAI_ORG_ID", "org-leak")
	srv := voicetest.NewServer(t)
	cfg := openaiConfig(srv)
	cfg.APIKey = "" // a local server that needs no key
	bus := setup(t, cfg, stt.Options{})

	ev := voiceNote(voicetest.WriteFile(t, "file_18.oga", voicetest.SpeakOgg(t, phrase)))
	if rej := bus.Receive(t.Context(), ev); rej != nil {
		t.Fatalf("rejected: %s", rej.Reason)
	}
	ups := srv.Uploads()
	if len(ups) != 1 {
		t.Fatalf("%d uploads reached the configured server, want 1 (text now %q)", len(ups), ev.Text)
	}
	h := ups[0].Header
	for _, name := range []string{"Authorization", "X-Leak", "Openai-Organization"} {
		if v := h.Get(name); v != "" {
			t.Errorf("the local server got %s: %q from the gateway's environment", name, v)
		}
	}
}

// A speech command is the admin's program, run for every voice note: it got the gateway's
// whole environment, its platform tokens and API keys included. It now gets what a hook
// program gets without an env: list: the locale, home and search path, and no secrets.
func TestCommandProviderGetsNoSecretsInItsEnvironment(t *testing.T) {
	needSpeechTools(t)
	t.Setenv("GATEWAY_CHANNELS_TELEGRAM_TOKEN", "123:telegram-secret")
	t.Setenv("OPENAI_API_KEY", "sk-openai-secret")
	bus := setup(t, stt.Config{Enabled: true, Provider: "command",
		Command: []string{"sh", "-c", `env; : "$0"`, "{input}"}}, stt.Options{})
	ev := voiceNote(voicetest.WriteFile(t, "voice.ogg", voicetest.SpeakOgg(t, "hello")))
	if rej := bus.Receive(t.Context(), ev); rej != nil {
		t.Fatalf("rejected: %s", rej.Reason)
	}
	env := ev.Text // the program's stdout is the transcript
	for _, secret := range []string{"telegram-secret", "sk-openai-secret"} {
		if strings.Contains(env, secret) {
			t.Errorf("the speech command's environment holds %q", secret)
		}
	}
	if !strings.Contains(env, "PATH=") {
		t.Errorf("the speech command got no PATH")
	}
}
