package tts_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"gateway/builtins/stt"
	"gateway/builtins/tts"
	"gateway/builtins/voicetest"
	"gateway/channels"
	"gateway/hooks"
	"gateway/internal/audio"
	"gateway/internal/fakeserver"
)

type failures struct {
	mu   sync.Mutex
	list []string
}

func (f *failures) add(source, event string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = append(f.list, source+" "+event+": "+err.Error())
}

func (f *failures) get() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.list...)
}

// setup registers the TTS hook on a fresh bus, the way the gateway does, and returns
// the bus and the handler failures it counted.
func setup(t testing.TB, cfg tts.Config) (*hooks.Bus, *failures) {
	t.Helper()
	tt, err := tts.New(cfg, tts.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	f := &failures{}
	bus := hooks.NewBus(hooks.Options{OnError: f.add})
	scope := bus.Scope(tts.Source)
	tt.Register(scope)
	t.Cleanup(scope.Close)
	return bus, f
}

func reply(text string, voice bool) *hooks.MessageSend {
	return &hooks.MessageSend{
		Session:      hooks.Session{Channel: "test", ChatID: "1"},
		InputText:    "question",
		ResponseText: text,
		IsVoice:      voice,
	}
}

func openaiConfig(srv *voicetest.Server, mode string) tts.Config {
	return tts.Config{Mode: mode, Provider: "openai", BaseURL: srv.URL(), APIKey: "sk-test"}
}

func needTools(t testing.TB) {
	voicetest.RequireTools(t, "ffmpeg", "ffprobe", "espeak-ng")
}

// checkVoicePart asserts the one thing a chat needs: a single playable Ogg/Opus voice note.
func checkVoicePart(t *testing.T, parts []channels.Part) channels.Part {
	t.Helper()
	if len(parts) != 1 {
		t.Fatalf("%d parts, want exactly one voice note", len(parts))
	}
	p := parts[0]
	if p.Type != channels.PartAudio || p.MIME != "audio/ogg" || !p.Voice || p.Duration <= 0 || !audio.IsOggOpus(p.Data) || p.Size != int64(len(p.Data)) {
		t.Fatalf("part is not an Ogg/Opus voice note: type %s mime %s voice %v duration %v size %d ogg/opus %v",
			p.Type, p.MIME, p.Voice, p.Duration, p.Size, audio.IsOggOpus(p.Data))
	}
	info, err := audio.Probe(t.Context(), voicetest.WriteFile(t, "voice.ogg", p.Data))
	if err != nil || info.Codec != "opus" || info.Duration <= 0 {
		t.Fatalf("the voice note does not decode: %+v, %v", info, err)
	}
	return p
}

func TestModes(t *testing.T) {
	needTools(t)
	srv := voicetest.NewServer(t)
	cases := []struct {
		name     string
		mode     string // configured
		override string // MessageSend.TTSMode
		voice    bool   // the user spoke
		want     bool
	}{
		{"inbound, typed", tts.ModeInbound, "", false, false},
		{"inbound, spoken", tts.ModeInbound, "", true, true},
		{"default is inbound, typed", "", "", false, false},
		{"default is inbound, spoken", "", "", true, true},
		{"always, typed", tts.ModeAlways, "", false, true},
		{"always, spoken", tts.ModeAlways, "", true, true},
		{"chat says always", tts.ModeInbound, tts.ModeAlways, false, true},
		{"chat says off", tts.ModeAlways, tts.ModeOff, true, false},
		{"chat says inbound, typed", tts.ModeAlways, tts.ModeInbound, false, false},
		{"chat says inbound, spoken", tts.ModeAlways, tts.ModeInbound, true, true},
		{"unknown chat mode keeps the configured one", tts.ModeAlways, "loud", false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bus, fails := setup(t, openaiConfig(srv, c.mode))
			ev := reply("The kitchen lights are on.", c.voice)
			ev.TTSMode = c.override
			parts := bus.Send(t.Context(), ev)
			if !c.want {
				if len(parts) != 0 {
					t.Fatalf("%d parts, want none", len(parts))
				}
				return
			}
			checkVoicePart(t, parts)
			if f := fails.get(); len(f) != 0 {
				t.Fatalf("failures: %v", f)
			}
		})
	}
}

func TestModeOffRegistersNothing(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // needs no tools either
	tt, err := tts.New(tts.Config{Mode: tts.ModeOff}, tts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bus := hooks.NewBus(hooks.Options{})
	tt.Register(bus.Scope(tts.Source))
	if h := bus.Handlers(); len(h) != 0 {
		t.Fatalf("mode off registered %v", h)
	}
}

func TestOpenAIKeepsOggOpusAndSendsSpeakableText(t *testing.T) {
	needTools(t)
	srv := voicetest.NewServer(t)
	srv.RequireKey("sk-test")
	bus, _ := setup(t, openaiConfig(srv, tts.ModeAlways))
	ev := reply("**Done!** I turned on the [kitchen lights](https://example.com/lights).\n\n```sh\nlights on\n```", false)
	ev.Voice = "nova"
	p := checkVoicePart(t, bus.Send(t.Context(), ev))

	ogg, _ := srv.SpeechAudio()
	if !bytes.Equal(p.Data, ogg) {
		t.Error("Ogg/Opus from the service was re-encoded instead of kept")
	}
	reqs := srv.SpeechRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d speech requests, want 1", len(reqs))
	}
	r := reqs[0]
	want := "Done! I turned on the kitchen lights.\n(code omitted)."
	if r.Input != want || r.Voice != "nova" || r.Model != "tts-1" || r.ResponseFormat != "opus" {
		t.Fatalf("speech request %+v\nwant input %q, voice nova, model tts-1, format opus", r, want)
	}
}

func TestOpenAIWAVIsConverted(t *testing.T) {
	needTools(t)
	srv := voicetest.NewServer(t)
	srv.SetSpeechFormat(voicetest.SpeechWAV)
	bus, _ := setup(t, openaiConfig(srv, tts.ModeAlways))
	checkVoicePart(t, bus.Send(t.Context(), reply("Hello there.", false)))
}

// When speech fails the reply still goes as text: the hook gives no part and the bus
// counts the failure.
func TestFailureGivesNoPart(t *testing.T) {
	needTools(t)
	srv := voicetest.NewServer(t)
	bus, fails := setup(t, openaiConfig(srv, tts.ModeAlways))
	srv.FailNext(2, fakeserver.Failure{Status: 500})
	if parts := bus.Send(t.Context(), reply("Hello there.", true)); len(parts) != 0 {
		t.Fatalf("%d parts after a failure", len(parts))
	}
	if f := fails.get(); len(f) != 1 || !strings.HasPrefix(f[0], "builtin:tts message:send") {
		t.Fatalf("failures counted: %v", f)
	}
	if srv.Requests() != 2 {
		t.Fatalf("%d attempts, want 2 (one retry)", srv.Requests())
	}

	cfg := openaiConfig(srv, tts.ModeAlways)
	cfg.Timeout = 300 * time.Millisecond
	bus, fails = setup(t, cfg)
	srv.SetDelay(time.Minute)
	defer srv.SetDelay(0)
	if parts := bus.Send(t.Context(), reply("Hello there.", true)); len(parts) != 0 {
		t.Fatalf("%d parts after a timeout", len(parts))
	}
	if f := fails.get(); len(f) != 1 || !strings.Contains(f[0], "did not answer") {
		t.Fatalf("failures counted: %v", f)
	}
}

func TestNothingToSayGivesNoPart(t *testing.T) {
	needTools(t)
	srv := voicetest.NewServer(t)
	bus, fails := setup(t, openaiConfig(srv, tts.ModeAlways))
	for _, text := range []string{"", "   \n", "---", "| --- | --- |"} {
		if parts := bus.Send(t.Context(), reply(text, true)); len(parts) != 0 {
			t.Errorf("%q gave %d parts", text, len(parts))
		}
	}
	if srv.Requests() != 0 || len(fails.get()) != 0 {
		t.Fatalf("%d requests, failures %v", srv.Requests(), fails.get())
	}
}

func TestLongRepliesAreCappedAtASentence(t *testing.T) {
	needTools(t)
	srv := voicetest.NewServer(t)
	cfg := openaiConfig(srv, tts.ModeAlways)
	cfg.MaxChars = 100
	bus, _ := setup(t, cfg)
	long := strings.Repeat("This sentence is about forty characters. ", 10)
	checkVoicePart(t, bus.Send(t.Context(), reply(long, false)))
	in := srv.SpeechRequests()[0].Input
	if utf8.RuneCountInString(in) > 100 || !strings.HasSuffix(in, "characters.") {
		t.Fatalf("spoken text %q is not cut at a sentence within 100 characters", in)
	}
}

// espeak-ng speaks, the result is a real voice note, and the recogniser hears the words back.
func TestCommandProviderRoundTrip(t *testing.T) {
	needTools(t)
	voicetest.RequireTools(t, "pocketsphinx_continuous")
	const phrase = "please turn on the kitchen lights"
	grammar := voicetest.Grammar(t, phrase, "what is the weather today", "play some music")

	cases := map[string]tts.Config{
		"output file": {Mode: tts.ModeAlways, Provider: "command", Command: voicetest.EspeakCommand()},
		"stdout":      {Mode: tts.ModeAlways, Provider: "command", Command: []string{"espeak-ng", "--stdout", "-f", "{text_file}"}},
		"inline text": {Mode: tts.ModeAlways, Provider: "command", Command: []string{"espeak-ng", "-v", "{voice}", "-w", "{output}", "{text}"}, Voice: "en-us"},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			bus, fails := setup(t, cfg)
			parts := bus.Send(t.Context(), reply("Please turn on the *kitchen* lights.", false))
			if f := fails.get(); len(f) != 0 {
				t.Fatalf("failures: %v", f)
			}
			p := checkVoicePart(t, parts)
			path := voicetest.WriteFile(t, "reply.ogg", p.Data)
			if voicetest.HasTools("opusinfo") {
				out, err := audio.Run(t.Context(), audio.Cmd{Argv: []string{"opusinfo", path}, MaxStdout: 1 << 16})
				if err != nil || !strings.Contains(string(out), "Playback length") {
					t.Fatalf("opusinfo cannot read the voice note: %v\n%s", err, out)
				}
			}
			s, err := stt.New(stt.Config{Enabled: true, Provider: "command",
				Command: voicetest.PocketsphinxCommand(grammar)}, stt.Options{TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			heard, err := s.Transcribe(t.Context(), p, "")
			if err != nil || !strings.Contains(heard, "kitchen lights") {
				t.Fatalf("heard %q, %v", heard, err)
			}
		})
	}
}

// A reply that starts with a dash must not be taken for an option by the program.
func TestInlineTextStartingWithDash(t *testing.T) {
	needTools(t)
	bus, fails := setup(t, tts.Config{Mode: tts.ModeAlways, Provider: "command",
		Command: []string{"espeak-ng", "-w", "{output}", "{text}"}})
	checkVoicePart(t, bus.Send(t.Context(), reply("-5 degrees outside, wear a coat.", false)))
	if f := fails.get(); len(f) != 0 {
		t.Fatalf("failures: %v", f)
	}
}

func TestCommandFailures(t *testing.T) {
	needTools(t)
	for name, argv := range map[string][]string{
		"exit status": {"sh", "-c", "echo no voice >&2; exit 1", "{output}"},
		"no output":   {"true", "{output}"},
		"not audio":   {"sh", "-c", "echo hello > \"$0\"", "{output}"},
	} {
		t.Run(name, func(t *testing.T) {
			bus, fails := setup(t, tts.Config{Mode: tts.ModeAlways, Provider: "command", Command: argv})
			if parts := bus.Send(t.Context(), reply("Hello.", true)); len(parts) != 0 {
				t.Fatalf("%d parts from a failing program", len(parts))
			}
			if len(fails.get()) != 1 {
				t.Fatalf("failures: %v", fails.get())
			}
		})
	}
}

func TestNewChecksTheCommandExists(t *testing.T) {
	voicetest.RequireTools(t, "ffmpeg", "ffprobe")
	_, err := tts.New(tts.Config{Provider: "command", Command: []string{"no-such-speaker", "{output}"}}, tts.Options{})
	if err == nil || !strings.Contains(err.Error(), `"no-such-speaker" not found`) {
		t.Fatalf("New = %v", err)
	}
	t.Setenv("PATH", t.TempDir())
	_, err = tts.New(tts.Config{Provider: "command", Command: voicetest.EspeakCommand()}, tts.Options{})
	if err == nil || !strings.Contains(err.Error(), "apt-get install espeak-ng") || !strings.Contains(err.Error(), "apt-get install ffmpeg") {
		t.Fatalf("New without tools = %v", err)
	}
}

func TestValidateNamesTheKey(t *testing.T) {
	cases := []struct {
		cfg  tts.Config
		want string
	}{
		{tts.DefaultConfig(), ""},
		{tts.Config{}, ""},
		{tts.Config{Provider: "command", Command: voicetest.EspeakCommand(), OutputFormat: "mp3"}, ""},
		{tts.Config{Mode: "sometimes"}, `tts.mode: "sometimes" is not a mode`},
		{tts.Config{Provider: "polly"}, `tts.provider: "polly" is not a provider`},
		{tts.Config{Provider: "command"}, "tts.command: is required"},
		{tts.Config{Command: []string{"x"}}, "tts.command: is only used with provider: command"},
		{tts.Config{Provider: "command", Command: []string{"x", "-v", "{voice}"}}, "tts.voice: must be set"},
		{tts.Config{OutputFormat: "pcm"}, `tts.output_format: "pcm" is not a format`},
		{tts.Config{BaseURL: "ftp://x"}, "tts.base_url:"},
		{tts.Config{MaxChars: -1}, "tts.max_chars:"},
		{tts.Config{Timeout: -1}, "tts.timeout:"},
		{tts.Config{Mode: tts.ModeOff, Provider: "polly"}, ""},
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

// The TTS handler adds conversion (when needed) and probing to each spoken reply; these
// measure that overhead with providers that answer at once.
func BenchmarkOverheadOpenAIOgg(b *testing.B) {
	needTools(b)
	srv := voicetest.NewServer(b)
	benchSend(b, openaiConfig(srv, tts.ModeAlways))
}

func BenchmarkOverheadCommandWAV(b *testing.B) {
	needTools(b)
	_, wav := voicetest.NewServer(b).SpeechAudio()
	src := voicetest.WriteFile(b, "speech.wav", wav)
	benchSend(b, tts.Config{Mode: tts.ModeAlways, Provider: "command", Command: []string{"cp", src, "{output}"}})
}

func benchSend(b *testing.B, cfg tts.Config) {
	bus, _ := setup(b, cfg)
	ctx := context.Background()
	for b.Loop() {
		if parts := bus.Send(ctx, reply("The kitchen lights are on.", true)); len(parts) != 1 {
			b.Fatal("no voice part")
		}
	}
}

// A speech command gets no secrets of the gateway's environment, as a hook program does
// not (see the stt builtin's test of the same).
func TestCommandGetsNoSecretsInItsEnvironment(t *testing.T) {
	needTools(t)
	t.Setenv("GATEWAY_CHANNELS_TELEGRAM_TOKEN", "123:telegram-secret")
	t.Setenv("OPENAI_API_KEY", "sk-openai-secret")
	envFile := filepath.Join(t.TempDir(), "env")
	bus, fails := setup(t, tts.Config{Mode: tts.ModeAlways, Provider: "command",
		Command: []string{"sh", "-c", `env > "$0"; exec espeak-ng -w "$1" "$2"`, envFile, "{output}", "{text}"}})
	checkVoicePart(t, bus.Send(t.Context(), reply("Hello.", true)))
	if f := fails.get(); len(f) != 0 {
		t.Fatalf("failures: %v", f)
	}
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"telegram-secret", "sk-openai-secret"} {
		if strings.Contains(string(b), secret) {
			t.Errorf("the speech command's environment holds %q", secret)
		}
	}
	if !strings.Contains(string(b), "PATH=") {
		t.Errorf("the speech command got no PATH")
	}
}
