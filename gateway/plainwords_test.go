package gateway

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-telegram/bot/models"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/harness"
	"gateway/harness/anthropictest"
	"gateway/harness/openaitest"
	"gateway/hooks"
	"gateway/internal/secret"
	"gateway/profiles"
)

// What a chat user reads is in plain words: the settings behind it (config keys such as
// llm.max_tokens or tts.mode) and the server's paths are the admin's, in the log.

// tgUser is a Telegram user in a private chat with a gateway, through the fake Bot API,
// and the gateway's log.
type tgUser struct {
	t    *testing.T
	tg   *telegramtest.Server
	e    *testEnv
	logs *channeltest.LogBuffer
}

func newTGUser(t *testing.T, opts ...envOpt) *tgUser {
	t.Helper()
	tg := telegramtest.NewServer(t)
	u := &tgUser{t: t, tg: tg, logs: &channeltest.LogBuffer{}}
	opts = append(opts, func(_ *Config, _ *Runtime, d *Deps) { d.Logger = slog.New(slog.NewTextHandler(u.logs, nil)) })
	ch, err := telegram.New(telegram.Config{Enabled: true, Token: secret.Secret(tg.Token), APIURL: tg.URL, Mode: telegram.ModePolling,
		Access: channels.Access{AllowFrom: []string{fmt.Sprint(telegramtest.UserID)}, DMPolicy: channels.DMAllowlist, RequireMention: true}},
		telegram.Options{StateDir: t.TempDir(), PollTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(u.logs, nil)),
			Pacing: telegram.Pacing{GlobalPerSecond: -1, PerChatInterval: -1, GroupInterval: -1}})
	if err != nil {
		t.Fatal(err)
	}
	u.e = newEnvWith(t, t.TempDir(), []channels.Channel{ch}, opts...)
	return u
}

// ask sends text and returns what the bot shows in the chat once one of its messages
// since contains want (the whole of its messages since, joined).
func (u *tgUser) ask(text, want string) string {
	u.t.Helper()
	const chat = telegramtest.UserID
	before := len(u.tg.Messages(chat))
	u.tg.Send(telegramtest.Update{ChatID: chat, Text: text})
	msgs := waitPosted(u.t, u.tg, chat, fmt.Sprintf("an answer to %q saying %q", text, want), func(m []telegramtest.Message) bool {
		for _, x := range m[min(before, len(m)):] {
			if strings.Contains(x.Text, want) {
				return true
			}
		}
		return false
	})
	var texts []string
	for _, x := range msgs[before:] {
		texts = append(texts, x.Text)
	}
	return strings.Join(texts, "\n")
}

// assertPlain fails when the chat's text names a config key or a path.
func assertPlain(t *testing.T, what, text string) {
	t.Helper()
	// What gives away a config key or a server path in a chat's text.
	for _, w := range []string{"llm.", "tts.", "stt.", "hooks.", "state_dir", "channels.", "sessions.", "profiles.", "turn_timeout", "max_tokens", "/tmp/"} {
		if strings.Contains(text, w) {
			t.Errorf("%s: the chat read %q, which names %q", what, text, w)
		}
	}
}

// An answer cut at the length limit told the chat "(llm.max_tokens)". The chat reads that
// it reached the limit; the log names the setting, for the admin.
func TestAnswerAtTheLengthLimitIsToldPlainly(t *testing.T) {
	srv, opt := withOpenAIFake(t, 0)
	u := newTGUser(t, opt)
	srv.Push(openaitest.Reply{Text: "Step one, step two,", FinishReason: "length"}, openaitest.Reply{Text: "", FinishReason: "length"})

	got := u.ask("all the steps", "Ask me to go on")
	assertPlain(t, "a cut answer", got)
	if !strings.Contains(got, "Step one, step two,") || !strings.Contains(got, "length limit") {
		t.Errorf("a cut answer reads %q; want its words and that it reached the length limit", got)
	}
	got = u.ask("and again", "before writing anything")
	assertPlain(t, "an answer cut before it began", got)
	if !strings.Contains(u.logs.String(), "llm.max_tokens") {
		t.Errorf("the log does not name llm.max_tokens:\n%s", u.logs.String())
	}
}

// gatewayErrors collects the gateway:error events of e's bus (the admin's hooks read them).
func gatewayErrors(e *testEnv) func() []string {
	var mu sync.Mutex
	var out []string
	e.bus.Observe("test", func(_ context.Context, ev hooks.Event) {
		if ge, ok := ev.(*hooks.GatewayError); ok {
			mu.Lock()
			out = append(out, ge.Error)
			mu.Unlock()
		}
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), out...)
	}
}

// A provider with no model configured (a profile that switches to another provider and
// names none) told the chat "The model API rejected the request (HTTP 400): no model is
// configured; set llm.model": a key for the admin, and an API that was never asked. The
// chat reads that the admin has not chosen a model; the log and gateway:error name
// llm.model. No request reaches the API.
func TestNoModelConfiguredIsToldPlainly(t *testing.T) {
	oa, an := openaitest.NewServer(), anthropictest.NewServer()
	t.Cleanup(oa.Close)
	t.Cleanup(an.Close)
	for _, llm := range []harness.Config{
		{Provider: "openai", BaseURL: oa.URL()},
		{Provider: "anthropic", BaseURL: an.URL(), APIKey: "sk-ant-test"},
	} {
		t.Run(llm.Provider, func(t *testing.T) {
			u := newTGUser(t, func(_ *Config, rt *Runtime, d *Deps) {
				rt.LLM = llm
				d.NewProvider = func(cfg harness.Config) (harness.Provider, error) { return harness.NewProvider(cfg, nil) }
			})
			events := gatewayErrors(u.e)
			got := u.ask("hello", noModelText)
			assertPlain(t, "no model", got)
			if !strings.Contains(u.logs.String(), "llm.model") {
				t.Errorf("the log does not name llm.model:\n%s", u.logs.String())
			}
			if ev := events(); len(ev) != 1 || !strings.Contains(ev[0], "llm.model") {
				t.Errorf("gateway:error events %q; want one naming llm.model", ev)
			}
			if got := u.ask("/status", "Model:"); !strings.Contains(got, "Model: none chosen yet ("+llm.Provider+")") {
				t.Errorf("/status reads %q; want that no model is chosen", got)
			}
		})
	}
	if n := len(oa.Requests()) + len(an.Requests()); n != 0 {
		t.Errorf("%d requests reached the model APIs; want none", n)
	}
}

// A chat whose profile's tools cannot be set up read "I couldn't start the assistant for
// this chat: unknown tool \"no_such_tool\" (builtin tools: ...)", the words of the admin's
// profile.yaml; /new read the same. Both now read that the setup needs the admin, whom
// the log tells which tool.
func TestChatSetupProblemIsToldPlainly(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tooled"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tooled", "profile.yaml"), []byte("tools: [no_such_tool]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Loaded without the check a gateway's load makes, as a profile the tools changed under.
	set, err := profiles.Load(profiles.Config{Dir: dir, Default: "tooled"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	u := newTGUser(t, func(_ *Config, rt *Runtime, _ *Deps) {
		rt.Profiles, rt.Tools = set, harness.BuiltinTools
	})
	events := gatewayErrors(u.e)
	for _, text := range []string{"hello", "/new"} {
		got := u.ask(text, "only the admin can fix")
		assertPlain(t, text, got)
		if strings.Contains(got, "no_such_tool") {
			t.Errorf("%s: the chat read %q, which names the profile's tool", text, got)
		}
	}
	if !strings.Contains(u.logs.String(), "no_such_tool") {
		t.Errorf("the log does not name the tool:\n%s", u.logs.String())
	}
	if ev := events(); len(ev) != 1 || !strings.Contains(ev[0], "no_such_tool") {
		t.Errorf("gateway:error events %q; want the turn's, naming the tool", ev)
	}
}

// /new whose fresh start could not be saved read "I couldn't start a new conversation: the
// conversation was reset, but saving that failed: open /.../telegram-1001-....jsonl: is a
// directory": the server's files. The chat reads that the change could not be saved; the
// log has the file.
func TestNewThatCannotBeSavedIsToldPlainly(t *testing.T) {
	u := newTGUser(t)
	u.e.fake.SetFunc(func(*harness.Request) harness.FakeReply { return harness.FakeReply{Text: "first answer"} })
	u.ask("hello", "first answer")
	// The answer shows (as its preview) before the turn saves it: wait for the history.
	file := ""
	deadline := time.Now().Add(20 * time.Second)
	for file == "" {
		filepath.WalkDir(u.e.dir, func(path string, d fs.DirEntry, err error) error {
			if b, rerr := os.ReadFile(path); err == nil && !d.IsDir() && rerr == nil && strings.Contains(path, "telegram") &&
				strings.Contains(string(b), "first answer") {
				file = path
			}
			return nil
		})
		if file == "" && time.Now().After(deadline) {
			t.Fatal("the first turn is not in a history file")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A directory where the history file was: the next write fails, whoever the tests run as.
	if err := os.Rename(file, file+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(file, 0o700); err != nil {
		t.Fatal(err)
	}
	got := u.ask("/new", "couldn't start a new conversation")
	if strings.Contains(got, u.e.dir) || strings.Contains(got, ".jsonl") {
		t.Errorf("/new: the chat read %q, which names the server's files", got)
	}
	if !strings.Contains(u.logs.String(), file) {
		t.Errorf("the log does not name the history file %s:\n%s", file, u.logs.String())
	}
}

// /status said "Voice replies: default (as configured)" until the chat chose with /voice,
// even on a gateway without voice replies, and /voice named tts.mode. /status now shows
// the mode in effect for the chat (the gateway's tts.mode, under the profile's, under the
// chat's /voice), and says what the queue mode means.
func TestStatusShowsTheVoiceModeInEffect(t *testing.T) {
	dir := t.TempDir()
	for name, yaml := range map[string]string{"plain": "", "talker": "tts: {mode: always}\n"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "profile.yaml"), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	load := func(def string) *profiles.Set {
		set, err := profiles.Load(profiles.Config{Dir: dir, Default: def}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	status := func(t *testing.T, u *tgUser) string {
		t.Helper()
		got := u.ask("/status", "Voice replies:")
		assertPlain(t, "/status", got)
		if !strings.Contains(got, "Queue mode: followup (what you send while I answer is answered after it, in order)") {
			t.Errorf("/status reads %q; want the queue mode in words", got)
		}
		return got
	}
	for _, c := range []struct {
		name, voiceMode, profile, want string
	}{
		{"no voice replies", "", "talker", "Voice replies: off (voice replies are not set up on this gateway)"},
		{"the gateway's mode", "inbound", "plain", "Voice replies: auto (when you send a voice note)"},
		{"the profile's mode", "inbound", "talker", "Voice replies: on (every answer)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newTGUser(t, func(_ *Config, rt *Runtime, _ *Deps) { rt.VoiceMode, rt.Profiles = c.voiceMode, load(c.profile) })
			if got := status(t, u); !strings.Contains(got, c.want) {
				t.Errorf("/status reads %q; want %q", got, c.want)
			}
			if c.voiceMode == "" {
				got := u.ask("/voice on", "not set up")
				assertPlain(t, "/voice on", got)
				return
			}
			u.ask("/voice off", "Voice replies: off")
			if got := status(t, u); !strings.Contains(got, "Voice replies: off") {
				t.Errorf("/status after /voice off reads %q", got)
			}
		})
	}
}

// A stranger writing to the bot read "Ask its admin to add your user id 666 to
// allow_from": the setting is the admin's. The stranger reads their id, to give the admin;
// the log names allow_from beside it.
func TestStrangerIsToldPlainly(t *testing.T) {
	u := newTGUser(t)
	u.tg.Send(telegramtest.Update{ChatID: 666, From: &models.User{ID: 666, FirstName: "Eve"}, Text: "hello?"})
	msgs := waitPosted(t, u.tg, 666, "the stranger told", func(m []telegramtest.Message) bool { return len(m) > 0 })
	got := msgs[0].Text
	assertPlain(t, "a stranger", got)
	if strings.Contains(got, "allow_from") || !strings.Contains(got, "666") {
		t.Errorf("the stranger read %q; want their id and no setting", got)
	}
	if !strings.Contains(u.logs.String(), "allow_from") {
		t.Errorf("the log does not name allow_from:\n%s", u.logs.String())
	}
}
