package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/go-telegram/bot/models"

	"gateway/builtins/stt"
	"gateway/builtins/tts"
	"gateway/builtins/voicetest"
	"gateway/channels"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/harness"
	"gateway/internal/audio"
	"gateway/internal/secret"
	"gateway/state"
)

const spoken = "please turn on the kitchen lights"

// withVoice registers the builtin STT and TTS hooks on the test gateway's bus.
func withVoice(t *testing.T, sttCfg stt.Config, ttsCfg tts.Config) envOpt {
	return func(c *Config, rt *Runtime, d *Deps) {
		s, err := stt.New(sttCfg, stt.Options{Logger: slog.New(slog.DiscardHandler), TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		s.Register(rt.Bus.Scope("builtin:stt"))
		v, err := tts.New(ttsCfg, tts.Options{Logger: slog.New(slog.DiscardHandler), TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		v.Register(rt.Bus.Scope("builtin:tts"))
		rt.VoiceMode = v.Mode()
	}
}

func localVoice(t *testing.T) envOpt {
	voicetest.RequireTools(t, "espeak-ng", "pocketsphinx_continuous", "ffmpeg", "ffprobe")
	sttCfg := stt.DefaultConfig()
	sttCfg.Enabled, sttCfg.Provider = true, "command"
	sttCfg.Command = voicetest.PocketsphinxCommand(voicetest.Grammar(t, spoken, "what time is it"))
	sttCfg.InputFormat = stt.InputWAV
	ttsCfg := tts.DefaultConfig()
	ttsCfg.Mode, ttsCfg.Provider, ttsCfg.Command, ttsCfg.OutputFormat = "inbound", "command", voicetest.EspeakCommand(), "wav"
	return withVoice(t, sttCfg, ttsCfg)
}

func openAIVoice(t *testing.T, srv *voicetest.Server) envOpt {
	voicetest.RequireTools(t, "ffmpeg", "ffprobe")
	sttCfg := stt.DefaultConfig()
	sttCfg.Enabled, sttCfg.Provider, sttCfg.BaseURL, sttCfg.APIKey = true, "openai", srv.URL(), "sk-test"
	ttsCfg := tts.DefaultConfig()
	ttsCfg.Mode, ttsCfg.Provider, ttsCfg.BaseURL, ttsCfg.APIKey = "inbound", "openai", srv.URL(), "sk-test"
	return withVoice(t, sttCfg, ttsCfg)
}

// sayVoice sends a voice note from the web chat, as the record button does.
func (w *wsClient) sayVoice(ogg []byte) {
	w.t.Helper()
	w.n++
	b, _ := json.Marshal(map[string]any{"type": "message", "id": w.chat + "-v" + string(rune('0'+w.n)), "chat_id": w.chat,
		"audio": map[string]string{"mime": "audio/ogg", "data": base64.StdEncoding.EncodeToString(ogg)}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, b); err != nil {
		w.t.Fatal(err)
	}
}

// voiceParts returns the audio parts of an answer's frames, fetched from their URLs.
func (e *testEnv) voiceParts(t *testing.T, fs []wsFrame) [][]byte {
	t.Helper()
	var out [][]byte
	for _, f := range fs {
		for _, p := range f.Parts {
			if p["type"] != "audio" {
				continue
			}
			resp, err := http.Get(e.url + p["url"].(string))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out = append(out, b)
		}
	}
	return out
}

// assertPlayableOpus checks that b is Ogg/Opus that decodes to a duration above zero.
func assertPlayableOpus(t *testing.T, b []byte) {
	t.Helper()
	if !audio.IsOggOpus(b) {
		t.Fatalf("voice part is not Ogg/Opus (%d bytes, starts %q)", len(b), b[:min(8, len(b))])
	}
	path := filepath.Join(t.TempDir(), "reply.ogg")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	info, err := audio.Probe(ctx, path)
	if err != nil || info.Duration <= 0 {
		t.Fatalf("voice part does not decode to a duration: %+v, %v", info, err)
	}
}

// TestVoiceRoundTripWithLocalTools: espeak-ng speaks, the web chat sends it as a voice note,
// pocketsphinx transcribes it, the model gets the words, and the answer comes back as text
// plus one playable Ogg/Opus voice note — all with real audio tools.
func TestVoiceRoundTripWithLocalTools(t *testing.T) {
	e := newEnv(t, localVoice(t))
	voiceRoundTrip(t, e, voicetest.SpeakOgg(t, spoken))
}

// TestVoiceRoundTripWithOpenAIProviders does the same through the OpenAI-compatible audio API.
func TestVoiceRoundTripWithOpenAIProviders(t *testing.T) {
	srv := voicetest.NewServer(t)
	srv.SetTranscript(spoken)
	e := newEnv(t, openAIVoice(t, srv))
	voiceRoundTrip(t, e, voicetest.SpeakOgg(t, spoken))
	if ups := srv.Uploads(); len(ups) != 1 {
		t.Fatalf("transcription uploads = %d; want 1", len(ups))
	}
	if reqs := srv.SpeechRequests(); len(reqs) != 1 {
		t.Fatalf("speech requests = %d; want exactly 1", len(reqs))
	}
}

func voiceRoundTrip(t *testing.T, e *testEnv, ogg []byte) {
	t.Helper()
	c := e.client(t, "voice1")
	c.sayVoice(ogg)
	fs := c.until("done", "error")
	if last := fs[len(fs)-1]; last.Type != "done" {
		t.Fatalf("voice note answered with %+v", last)
	}
	reqs := e.fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("model requests = %d", len(reqs))
	}
	heard := strings.ToLower(lastUser(reqs[0]))
	if !strings.Contains(heard, "kitchen") || !strings.Contains(heard, "lights") {
		t.Fatalf("the model received %q; want the spoken words", heard)
	}
	voices := e.voiceParts(t, fs)
	if len(voices) != 1 {
		t.Fatalf("answer has %d voice parts; want exactly one", len(voices))
	}
	assertPlayableOpus(t, voices[0])

	// inbound mode: a typed message gets text only.
	c.say("what time is it")
	fs = c.until("done", "error")
	if n := len(e.voiceParts(t, fs)); n != 0 || fs[len(fs)-1].Type != "done" {
		t.Fatalf("typed message got %d voice parts (%s); want none", n, fs[len(fs)-1].Type)
	}
}

// An audio file attached in the web chat (a recording made elsewhere, not the record
// button) is transcribed, as on the other platforms, and answered in text: it was no
// voice note.
func TestAudioFileAttachedInTheWebChatIsTranscribed(t *testing.T) {
	e := newEnv(t, localVoice(t))
	c := e.client(t, "memo")
	b, _ := json.Marshal(map[string]any{"type": "message", "id": "m1", "chat_id": "memo", "text": "my memo", "files": []map[string]string{
		{"mime": "audio/ogg", "name": "memo.ogg", "data": base64.StdEncoding.EncodeToString(voicetest.SpeakOgg(t, spoken))}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.c.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
	fs := c.until("done", "error")
	if last := fs[len(fs)-1]; last.Type != "done" {
		t.Fatalf("the memo was answered with %+v", last)
	}
	reqs := e.fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("model requests = %d", len(reqs))
	}
	if heard := strings.ToLower(lastUser(reqs[0])); !strings.Contains(heard, "my memo") || !strings.Contains(heard, "kitchen lights") {
		t.Fatalf("the model received %q; want the text and the spoken words", heard)
	}
	if n := len(e.voiceParts(t, fs)); n != 0 {
		t.Fatalf("the answer to an attached file has %d voice parts; want none", n)
	}
}

func TestVoiceModesPerChat(t *testing.T) {
	srv := voicetest.NewServer(t)
	srv.SetTranscript(spoken)
	e := newEnv(t, openAIVoice(t, srv))
	c := e.client(t, "voice2")
	ask := func(voice bool) int {
		if voice {
			c.sayVoice(voicetest.SpeakOgg(t, spoken))
		} else {
			c.say("hello")
		}
		return len(e.voiceParts(t, c.until("done", "error")))
	}
	c.say("/voice on")
	c.until("done")
	if n := ask(false); n != 1 {
		t.Fatalf("/voice on: typed message got %d voice parts; want 1", n)
	}
	c.say("/voice off")
	c.until("done")
	if n := ask(true); n != 0 {
		t.Fatalf("/voice off: voice note got %d voice parts; want 0", n)
	}
	c.say("/voice auto")
	c.until("done")
	if a, b := ask(true), ask(false); a != 1 || b != 0 {
		t.Fatalf("/voice auto: voice → %d, typed → %d; want 1 and 0", a, b)
	}
}

func TestBadVoiceNotesGetPlainRepliesAndTheNextMessageWorks(t *testing.T) {
	srv := voicetest.NewServer(t)
	srv.SetTranscript(spoken)
	voicetest.RequireTools(t, "ffmpeg", "ffprobe")
	sttCfg := stt.DefaultConfig()
	sttCfg.Enabled, sttCfg.Provider, sttCfg.BaseURL, sttCfg.APIKey = true, "openai", srv.URL(), "sk-test"
	sttCfg.MaxBytes = 4000 // a spoken sentence is larger
	ttsCfg := tts.DefaultConfig()
	ttsCfg.Mode, ttsCfg.Provider, ttsCfg.BaseURL, ttsCfg.APIKey = "inbound", "openai", srv.URL(), "sk-test"
	e := newEnv(t, withVoice(t, sttCfg, ttsCfg))
	c := e.client(t, "voice3")
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"oversized", voicetest.SpeakOgg(t, spoken), "limit"},
		{"empty", []byte{}, "empty"},
		{"corrupt", []byte("OggS this is not really audio at all, just bytes pretending"), "damaged"},
		{"wrong format", []byte("\x89PNG\r\n\x1a\n not audio"), "not audio"},
	} {
		c.sayVoice(tc.data)
		fs := c.until("done", "error")
		last := fs[len(fs)-1]
		if !strings.Contains(strings.ToLower(last.Text), tc.want) {
			t.Fatalf("%s audio answered %+v; want a plain explanation mentioning %q", tc.name, last, tc.want)
		}
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("bad audio reached the model %d times", n)
	}
	c.say("hello")
	if fs := c.until("done", "error"); fs[len(fs)-1].Type != "done" {
		t.Fatalf("next message got %+v", fs[len(fs)-1])
	}
}

// TestVoiceRoundTripOnTelegram: a real spoken voice note sent to the fake Bot API reaches
// the model as text, and the answer arrives as text plus a native Ogg/Opus voice note.
func TestVoiceRoundTripOnTelegram(t *testing.T) {
	tg, e := telegramVoiceEnv(t)
	tg.Send(telegramtest.Update{ChatID: 4242, From: &models.User{ID: 4242, FirstName: "Ann"}, Voice: voicetest.SpeakOgg(t, spoken)})

	deadline := time.Now().Add(30 * time.Second)
	var voice, text *telegramtest.Message
	for time.Now().Before(deadline) && (voice == nil || text == nil) {
		for _, m := range tg.Messages(4242) {
			switch {
			case m.Kind == "voice":
				voice = &m
			case m.Kind == "text" && m.Text != "":
				text = &m
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if voice == nil || text == nil {
		t.Fatalf("bot posted %+v; want a text answer and a voice note", tg.Messages(4242))
	}
	heard := strings.ToLower(lastUser(e.fake.Requests()[0]))
	if !strings.Contains(heard, "kitchen") || !strings.Contains(heard, "lights") {
		t.Fatalf("the model received %q; want the spoken words", heard)
	}
	if !voice.Opus {
		t.Fatalf("voice note is not Ogg/Opus")
	}
	assertPlayableOpus(t, voice.File)
}

// A recording sent to Telegram as a file (a document of type audio/*: an exported voice
// note, a memo from another app) is transcribed like an audio file, as on Discord and Slack.
func TestAudioDocumentOnTelegramIsTranscribed(t *testing.T) {
	tg, e := telegramVoiceEnv(t)
	tg.Send(telegramtest.Update{ChatID: 4242, From: &models.User{ID: 4242, FirstName: "Ann"}, Caption: "from my phone",
		Document: voicetest.SpeakOgg(t, spoken), DocumentName: "memo.opus", DocumentMIME: "audio/ogg"})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && len(e.fake.Requests()) == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if len(e.fake.Requests()) == 0 {
		t.Fatalf("the model was not asked; the bot posted %+v", tg.Messages(4242))
	}
	if heard := strings.ToLower(lastUser(e.fake.Requests()[0])); !strings.Contains(heard, "from my phone") || !strings.Contains(heard, "kitchen lights") {
		t.Fatalf("the model received %q; want the caption and the spoken words", heard)
	}
}

func TestEchoTranscriptShowsWhatWasHeard(t *testing.T) {
	srv := voicetest.NewServer(t)
	srv.SetTranscript(spoken)
	e := newEnv(t, openAIVoice(t, srv), func(c *Config, rt *Runtime, d *Deps) { c.EchoTranscript = true })
	c := e.client(t, "voice4")
	c.sayVoice(voicetest.SpeakOgg(t, spoken))
	first := c.until("done", "error")
	if got := first[len(first)-1].Text; got != "🎤 "+spoken {
		t.Fatalf("first frame %q; want the transcript echoed", got)
	}
	answer := c.until("done", "error")
	if answer[len(answer)-1].Type != "done" || len(e.voiceParts(t, answer)) != 1 {
		t.Fatalf("answer %v; want a done with one voice part", types(answer))
	}
}

func TestProfileVoiceOverrides(t *testing.T) {
	srv := voicetest.NewServer(t)
	e := newEnv(t, openAIVoice(t, srv), func(c *Config, rt *Runtime, d *Deps) {
		p := rt.Profiles.Default()
		p.TTSMode, p.TTSVoice = "always", "nova"
	})
	c := e.client(t, "voice5")
	c.say("hello")
	fs := c.until("done", "error")
	if n := len(e.voiceParts(t, fs)); n != 1 {
		t.Fatalf("a profile with tts.mode always: typed message got %d voice parts; want 1", n)
	}
	if reqs := srv.SpeechRequests(); len(reqs) != 1 || reqs[0].Voice != "nova" {
		t.Fatalf("speech requests %+v; want one with the profile's voice", reqs)
	}
}

// spokenNote is a speech server that hears spoken, a state file in a new folder, and a
// voice note saying spoken saved there.
func spokenNote(t *testing.T) (srv *voicetest.Server, dir string, db *state.DB, note channels.Part) {
	srv = voicetest.NewServer(t)
	srv.SetTranscript(spoken)
	dir = t.TempDir()
	db = openState(t, dir)
	t.Cleanup(func() { db.Close() })
	path := filepath.Join(dir, "note.ogg")
	ogg := voicetest.SpeakOgg(t, spoken)
	if err := os.WriteFile(path, ogg, 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, dir, db, channels.Part{Type: channels.PartAudio, MIME: "audio/ogg", Path: path, Size: int64(len(ogg)), Voice: true}
}

// A voice note answered again after a crash had its transcript echoed before its answer
// began to show (the journal kept where the answer showed): the restart does not echo it
// a second time. One with nothing kept is echoed: the crash came before the echo.
func TestReplayedVoiceNoteIsNotEchoedTwice(t *testing.T) {
	srv, dir, db, note := spokenNote(t)
	journal := func(chat string, shown bool) {
		body, err := encode(&channels.Message{ID: chat + "-1", Channel: "mem", ChatID: chat, UserID: "u" + chat, ChatType: channels.ChatDM,
			IsVoice: true, Parts: []channels.Part{note}, Time: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		seq, err := db.Accept("mem|"+chat+"|"+chat+"-1", body)
		if err != nil {
			t.Fatal(err)
		}
		if shown {
			if err := db.Place(seq, "1"); err != nil {
				t.Fatal(err)
			}
		}
	}
	journal("shown", true)
	journal("cut", false)
	e := newEnvIn(t, filepath.Join(dir, "sessions"), openAIVoice(t, srv), withDurable(db),
		func(c *Config, _ *Runtime, _ *Deps) { c.EchoTranscript = true })
	e.mem.waitDone(t, 3) // the cut one's echo and two answers
	echo := "done:🎤 " + spoken
	if got := e.mem.finals("shown"); len(got) != 1 || got[0] == echo {
		t.Fatalf("the note whose answer had begun to show got %q; want its answer alone, no second echo", got)
	}
	if got := e.mem.finals("cut"); len(got) != 2 || got[0] != echo {
		t.Fatalf("the note cut before its answer showed got %q; want the echo, then the answer", got)
	}
}

// telegramVoiceEnv is a gateway with local speech tools behind the fake Telegram, whose
// user 4242 may write to it.
func telegramVoiceEnv(t *testing.T) (*telegramtest.Server, *testEnv) {
	tg := telegramtest.NewServer(t)
	ch, err := telegram.New(telegram.Config{
		Enabled: true, Token: secret.Secret(tg.Token), APIURL: tg.URL, Mode: telegram.ModePolling,
		Access: channels.Access{AllowFrom: []string{"4242"}, DMPolicy: channels.DMAllowlist, RequireMention: true},
	}, telegram.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return tg, newEnvWith(t, t.TempDir(), []channels.Channel{ch}, localVoice(t))
}

// A voice note whose transcript was echoed, with the crash (here a shutdown past its
// deadline) coming while the model still worked on it, is answered after the restart
// without a second echo: the chat saw it already.
func TestVoiceNoteEchoedBeforeACrashIsNotEchoedAgain(t *testing.T) {
	srv, dir, db, note := spokenNote(t)
	echo := func(c *Config, _ *Runtime, _ *Deps) { c.EchoTranscript = true }
	first := newEnvIn(t, filepath.Join(dir, "sessions"), openAIVoice(t, srv), withDurable(db), echo)
	asked := make(chan struct{}, 1)
	first.fake.SetFunc(func(*harness.Request) harness.FakeReply {
		asked <- struct{}{}
		return harness.FakeReply{Text: "never finished", Delay: time.Hour}
	})
	msg := &channels.Message{ID: "n1", Channel: "mem", ChatID: "v1", UserID: "uv1", ChatType: channels.ChatDM, IsVoice: true,
		Parts: []channels.Part{note}}
	if err := first.mem.sink.Deliver(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
	case <-time.After(60 * time.Second):
		t.Fatal("the model was never asked")
	}
	if got := first.mem.finals("v1"); len(got) != 1 || got[0] != "done:🎤 "+spoken {
		t.Fatalf("before the crash the chat got %q; want the echo", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_ = first.g.Stop(ctx) // past the deadline: the turn is cut, as a crash would cut it
	cancel()

	second := newEnvIn(t, filepath.Join(dir, "sessions"), openAIVoice(t, srv), withDurable(db), echo)
	second.fake.SetFunc(func(req *harness.Request) harness.FakeReply { return harness.FakeReply{Text: "the lights are on"} })
	second.mem.waitDone(t, 1)
	if got := second.mem.finals("v1"); len(got) != 1 || !strings.HasPrefix(got[0], "done:the lights are on") {
		t.Fatalf("after the restart the chat got %q; want the answer alone, no second echo", got)
	}
}

// "/voice on" sent while an answer is on its way applies to that answer: it comes with a
// voice note. (The choice is made on the chat's loop while the turn reads it.)
func TestVoiceChoiceMadeWhileAnsweringAppliesToThatAnswer(t *testing.T) {
	srv := voicetest.NewServer(t)
	e := newEnv(t, openAIVoice(t, srv))
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	e.fake.SetFunc(func(*harness.Request) harness.FakeReply {
		asked <- struct{}{}
		<-release
		return harness.FakeReply{Text: "here it is"}
	})
	c := e.client(t, "voice6")
	c.say("hello")
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatal("the model was never asked")
	}
	c.say("/voice on")
	if fs := c.until("done", "error"); !strings.Contains(fs[len(fs)-1].Text, "Voice replies") {
		t.Fatalf("/voice on was answered %q", fs[len(fs)-1].Text)
	}
	free()
	answer := c.until("done", "error")
	if answer[len(answer)-1].Type != "done" || len(e.voiceParts(t, answer)) != 1 {
		t.Fatalf("the answer after /voice on: %v; want a done with one voice note", types(answer))
	}
}
