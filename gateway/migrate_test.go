package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/telegram/telegramtest"
	"gateway/harness"
	"gateway/harness/openaitest"
	"gateway/profiles"
	"gateway/state"
)

// migrateEnv is a gateway with Telegram (groups, mention gate), durable state (journal
// and settings), /voice available, and the fake OpenAI API answering "answer to <prompt>"
// (held while hold is set and the prompt names it).
type migrateEnv struct {
	*testEnv
	tg  *telegramtest.Server
	ai  *openaitest.Server
	dir string
}

func newMigrateEnv(t *testing.T, answer func(openaitest.Request) openaitest.Reply, opts ...envOpt) *migrateEnv {
	t.Helper()
	tg := telegramtest.NewServer(t)
	ai := openaitest.NewServer()
	t.Cleanup(ai.Close)
	if answer == nil {
		answer = func(r openaitest.Request) openaitest.Reply {
			return openaitest.Reply{Text: "answer to " + r.Messages[len(r.Messages)-1].Content}
		}
	}
	ai.SetFunc(answer)
	dir := t.TempDir()
	db := openState(t, dir)
	t.Cleanup(func() { db.Close() })
	return startMigrateEnv(t, tg, ai, db, filepath.Join(dir, "sessions"), opts...)
}

// startMigrateEnv is newMigrateEnv on given fakes and state: a second one on the same
// state is the gateway restarted.
func startMigrateEnv(t *testing.T, tg *telegramtest.Server, ai *openaitest.Server, db *state.DB, sessions string, opts ...envOpt) *migrateEnv {
	t.Helper()
	opts = append([]envOpt{withDurable(db), func(_ *Config, rt *Runtime, d *Deps) {
		rt.VoiceMode = "inbound"
		rt.LLM = harness.Config{Provider: "openai", Model: "gpt-test", BaseURL: ai.URL()}
		d.NewProvider = func(cfg harness.Config) (harness.Provider, error) { return harness.NewProvider(cfg, nil) }
	}}, opts...)
	e := newEnvWith(t, sessions, []channels.Channel{groupTelegram(t, tg, fmt.Sprint(telegramtest.UserID))}, opts...)
	return &migrateEnv{testEnv: e, tg: tg, ai: ai, dir: sessions}
}

// say writes text to the bot in the group chat and waits for a message of the bot there
// that shows want.
func (m *migrateEnv) say(t *testing.T, chat int64, text, want string) {
	t.Helper()
	m.tg.Send(telegramtest.Update{ChatID: chat, Mention: true, Text: text})
	waitPosted(t, m.tg, chat, fmt.Sprintf("the answer to %q in chat %d", text, chat), func(msgs []telegramtest.Message) bool {
		for _, x := range msgs {
			if strings.Contains(x.Text, want) {
				return true
			}
		}
		return false
	})
}

// asked is what the model was last asked whose last message holds prompt: every message's
// content, in order.
func (m *migrateEnv) asked(t *testing.T, prompt string) []string {
	t.Helper()
	reqs := m.ai.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		msgs := reqs[i].Messages
		if len(msgs) == 0 || !strings.Contains(msgs[len(msgs)-1].Content, prompt) {
			continue
		}
		var out []string
		for _, x := range msgs {
			out = append(out, x.Content)
		}
		return out
	}
	t.Fatalf("the model was never asked %q", prompt)
	return nil
}

// settled waits until the fake Telegram has no update the bot has not confirmed: every
// update sent so far was handed over.
func (m *migrateEnv) settled(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for m.tg.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d updates still not taken", m.tg.Pending())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (m *migrateEnv) history(t *testing.T, chat int64) []byte {
	t.Helper()
	name, err := harness.FileName(fmt.Sprintf("telegram:%d", chat))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(m.dir, name))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return b
}

// count is how many of list are the user's message text (as the model sees it, with the
// speaker's name).
func count(list []string, text string) int {
	n := 0
	for _, s := range list {
		if s == "alice: "+text {
			n++
		}
	}
	return n
}

// A group the bot talks in is upgraded to a supergroup (a new chat id, Telegram's two
// service messages): in the supergroup the bot still knows the conversation, and the
// chat's /voice choice still holds; the log tells the admin that the chat's id changed and
// which binding names the old one. The service messages coming again move nothing more.
func TestGroupUpgradedToSupergroupKeepsItsConversation(t *testing.T) {
	const group, super = -500, -100500
	set, err := profiles.Load(profiles.Config{Dir: t.TempDir()}, []profiles.Binding{
		{Profile: "assistant", Match: profiles.Match{Channel: "discord", Chat: "-500"}},
		{Profile: "assistant", Match: profiles.Match{Channel: "telegram", Chat: "-500"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs channeltest.LogBuffer
	m := newMigrateEnv(t, nil, func(_ *Config, rt *Runtime, d *Deps) {
		rt.Profiles = set
		d.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	m.say(t, group, "my colour is blue", "answer to alice: my colour is blue")
	m.say(t, group, "/voice off", "Voice replies: off")

	m.tg.Migrate(group, super)
	m.tg.MigrateTo(group, super)
	m.tg.MigrateFrom(group, super)
	m.say(t, super, "what is my colour?", "answer to alice: what is my colour?")
	if got := m.asked(t, "what is my colour?"); count(got, "my colour is blue") != 1 {
		t.Fatalf("in the supergroup the model was asked %q; want the group's conversation before it, once", got)
	}
	m.say(t, super, "/voice", "Voice replies: off")
	for _, want := range []string{
		"telegram: the chat -500 has a new id, -100500",
		"gateway.yaml names the old id -500 in bindings[1] (profile assistant): they go on applying to the chat under its new id until a binding names -100500",
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not tell the admin %q:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), "bindings[0]") {
		t.Errorf("the log names a binding of another channel:\n%s", logs.String())
	}

	// Telegram sends the notices again (both of them), then the conversation goes on.
	m.tg.MigrateTo(group, super)
	m.tg.MigrateFrom(group, super)
	m.settled(t)
	m.say(t, super, "and my name?", "answer to alice: and my name?")
	got := m.asked(t, "and my name?")
	if count(got, "my colour is blue") != 1 || count(got, "what is my colour?") != 1 {
		t.Fatalf("after the notices came again the model was asked %q; want the conversation once", got)
	}
	log := m.history(t, super)
	first := []byte(`"content":"alice: my colour is blue"`)
	if n := bytes.Count(log, []byte(`"type":"session"`)); n != 1 || bytes.Count(log, first) != 1 {
		t.Fatalf("the supergroup's history has %d headers and the first message %d times:\n%s", n, bytes.Count(log, first), log)
	}
	if !bytes.Contains(log, []byte(`"key":"telegram:-100500"`)) {
		t.Fatalf("the moved history's header does not name the supergroup:\n%s", log)
	}
	if old := m.history(t, group); old != nil {
		t.Fatalf("the group's history is still there after the move:\n%s", old)
	}
}

// A message the admin API left for a group's next turn follows the group to its new id:
// the supergroup's next turn carries it, once.
func TestUpgradedGroupsNextTurnKeepsAnInjectedMessage(t *testing.T) {
	const group, super = -700, -100700
	m := newMigrateEnv(t, nil)
	m.say(t, group, "hello", "answer to alice: hello")
	note := "(the build of the group's project failed)"
	body := map[string]any{"channel": "telegram", "chat_id": fmt.Sprint(group), "text": note, "deliver_as": "next_turn"}
	if code, out := apiPost(t, m.url+"/api/v1/inject", "", body); code != http.StatusAccepted {
		t.Fatalf("inject: %d %v", code, out)
	}
	m.tg.MigrateTo(group, super)
	m.tg.MigrateFrom(group, super)
	m.say(t, super, "what happened?", "what happened?")
	got := m.asked(t, "what happened?")
	if want := note + "\n\nalice: what happened?"; got[len(got)-1] != want {
		t.Fatalf("in the supergroup the model was asked %q; want the injected text before the message", got)
	}
}

// An answer in flight when the group is upgraded, with no service message seen yet: its
// send to the old id is refused (400, migrate_to_chat_id), so it is delivered to the new
// id, and the conversation follows the chat there.
func TestAnswerToAnUpgradedGroupReachesTheSupergroup(t *testing.T) {
	const group, super = -600, -100600
	release := make(chan struct{})
	m := newMigrateEnv(t, func(r openaitest.Request) openaitest.Reply {
		last := r.Messages[len(r.Messages)-1].Content
		if strings.Contains(last, "slowly") {
			<-release
		}
		return openaitest.Reply{Text: "answer to " + last}
	})
	m.say(t, group, "my colour is blue", "answer to alice: my colour is blue")
	m.tg.Send(telegramtest.Update{ChatID: group, Mention: true, Text: "think slowly"})
	deadline := time.Now().Add(20 * time.Second)
	for len(m.ai.Requests()) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the model was not asked the second question")
		}
		time.Sleep(20 * time.Millisecond)
	}
	m.tg.Migrate(group, super)
	close(release)
	waitPosted(t, m.tg, super, "the answer in flight, in the supergroup", func(msgs []telegramtest.Message) bool {
		return len(msgs) == 1 && msgs[0].Text == "answer to alice: think slowly"
	})
	m.say(t, super, "what is my colour?", "answer to alice: what is my colour?")
	if got := m.asked(t, "what is my colour?"); count(got, "my colour is blue") != 1 || count(got, "think slowly") != 1 {
		t.Fatalf("in the supergroup the model was asked %q; want the group's conversation before it, once", got)
	}
}

// When the supergroup's first messages were taken before Telegram's notice, the supergroup
// has a conversation of its own: it is kept (not overwritten, not merged), and the group's
// stays on disk under the old id.
func TestUpgradeKeepsAConversationTheSupergroupHasAlready(t *testing.T) {
	const group, super = -700, -100700
	m := newMigrateEnv(t, nil)
	m.say(t, group, "my colour is blue", "answer to alice: my colour is blue")
	m.say(t, super, "my colour is red", "answer to alice: my colour is red")
	m.tg.Migrate(group, super)
	m.tg.MigrateTo(group, super)
	m.settled(t)
	m.say(t, super, "what is my colour?", "answer to alice: what is my colour?")
	got := m.asked(t, "what is my colour?")
	if count(got, "my colour is red") != 1 || count(got, "my colour is blue") != 0 {
		t.Fatalf("in the supergroup the model was asked %q; want its own conversation", got)
	}
	if old := m.history(t, group); !bytes.Contains(old, []byte("my colour is blue")) {
		t.Fatalf("the group's history is gone:\n%s", old)
	}
}

// moveFails is a history store whose MoveLog fails, as a crash or a disk error in the
// middle of a move would leave it; moving is told each attempt.
type moveFails struct {
	harness.SessionStore
	moving chan struct{}
}

func (s moveFails) MoveLog(string, string) (harness.LogMove, error) {
	s.moving <- struct{}{}
	return 0, errors.New("the disk failed")
}

// A chat's move to its new id that could not be done (the store failed) stays in the
// intake journal: after the restart it is done, and the conversation is found under the
// new id.
func TestChatMoveThatFailedIsDoneAfterRestart(t *testing.T) {
	dir := t.TempDir()
	db := openState(t, dir)
	defer db.Close()
	sessions := filepath.Join(dir, "sessions")
	moving := make(chan struct{}, 1)
	first := newEnvIn(t, sessions, withDurable(db), func(_ *Config, _ *Runtime, d *Deps) {
		d.Store = moveFails{SessionStore: d.Store, moving: moving}
	})
	first.fake.SetFunc(func(req *harness.Request) harness.FakeReply { return harness.FakeReply{Text: "noted"} })
	first.mem.inject(t, "g1", "m1", "my colour is blue")
	first.mem.waitDone(t, 1)
	err := first.g.Deliver(context.Background(), &channels.Message{ID: "migrate:g1", Channel: "mem", ChatID: "g2",
		ChatType: channels.ChatGroup, MigrateFrom: "g1"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-moving:
	case <-time.After(20 * time.Second):
		t.Fatal("the move was never tried")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.g.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ := db.Pending(); len(p) != 1 {
		t.Fatalf("the journal holds %d messages after the failed move; want its notice", len(p))
	}

	second := newEnvIn(t, sessions, withDurable(db))
	second.fake.SetFunc(func(req *harness.Request) harness.FakeReply { return harness.FakeReply{Text: "blue"} })
	second.mem.inject(t, "g2", "m2", "what is my colour?")
	second.mem.waitDone(t, 1)
	reqs := second.fake.Requests()
	if len(reqs) != 1 || len(reqs[0].Messages) < 3 || reqs[0].Messages[len(reqs[0].Messages)-3].Content != "my colour is blue" {
		t.Fatalf("after the restart the new chat's model was asked %+v; want the old chat's conversation before the question", reqs)
	}
	// The answer's message leaves the journal just after its done frame was delivered.
	deadline := time.Now().Add(20 * time.Second)
	for p, _ := db.Pending(); len(p) != 0; p, _ = db.Pending() {
		if time.Now().After(deadline) {
			t.Fatalf("the journal still holds %d messages once the move was done", len(p))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The profile bound to the group's old id goes on answering in the supergroup: the admin
// is told to change the binding, and until then the chat keeps its persona.
func TestUpgradedGroupKeepsTheProfileBoundToItsOldId(t *testing.T) {
	const group, super = -600, -100600
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "pirate"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pirate", "SYSTEM.md"), []byte("You are a pirate."), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := profiles.Load(profiles.Config{Dir: dir}, []profiles.Binding{
		{Profile: "pirate", Match: profiles.Match{Channel: "telegram", Chat: fmt.Sprint(group)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := newMigrateEnv(t, nil, func(_ *Config, rt *Runtime, _ *Deps) { rt.Profiles = set })
	m.say(t, group, "ahoy", "answer to alice: ahoy")
	m.tg.Migrate(group, super)
	m.tg.MigrateTo(group, super)
	m.settled(t)
	m.say(t, super, "where is the treasure?", "answer to alice: where is the treasure?")
	if got := m.asked(t, "where is the treasure?"); len(got) == 0 || got[0] != "You are a pirate." {
		t.Fatalf("in the supergroup the model was asked %q; want the pirate profile's prompt first", got)
	}
}

// A message the admin API left for a group's next turn, when the gateway stops (or
// crashes) after the group became a supergroup and before the supergroup's next turn: after
// the restart, that turn carries it, once, and it then leaves the journal.
func TestUpgradedGroupsInjectedMessageSurvivesARestart(t *testing.T) {
	const group, super = -800, -100800
	tg := telegramtest.NewServer(t)
	ai := openaitest.NewServer()
	t.Cleanup(ai.Close)
	ai.SetFunc(func(r openaitest.Request) openaitest.Reply {
		return openaitest.Reply{Text: "answer to " + r.Messages[len(r.Messages)-1].Content}
	})
	dir := t.TempDir()
	db := openState(t, dir)
	t.Cleanup(func() { db.Close() })
	sessions := filepath.Join(dir, "sessions")

	first := startMigrateEnv(t, tg, ai, db, sessions)
	first.say(t, group, "hello", "answer to alice: hello")
	note := "(the build of the group's project failed)"
	body := map[string]any{"channel": "telegram", "chat_id": fmt.Sprint(group), "text": note, "deliver_as": "next_turn"}
	if code, out := apiPost(t, first.url+"/api/v1/inject", "", body); code != http.StatusAccepted {
		t.Fatalf("inject: %d %v", code, out)
	}
	first.tg.MigrateTo(group, super)
	first.tg.MigrateFrom(group, super)
	first.settled(t)
	// The move is done once the platform's notices left the journal: only the note waits.
	waitUntil(t, "the move to the new id done", func() bool {
		p, err := db.Pending()
		return err == nil && len(p) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.g.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	second := startMigrateEnv(t, tg, ai, db, sessions)
	second.say(t, super, "what happened?", "alice: what happened?")
	got := second.asked(t, "what happened?")
	if want := note + "\n\nalice: what happened?"; got[len(got)-1] != want {
		t.Fatalf("after the restart the supergroup's model was asked %q; want the injected text before the message", got)
	}
	second.say(t, super, "and then?", "answer to alice: and then?")
	// Once: no other turn before or after brought the note to the model.
	carried := 0
	for _, r := range ai.Requests() {
		if last := r.Messages[len(r.Messages)-1].Content; strings.Contains(last, note) {
			carried++
		}
	}
	if got := second.asked(t, "and then?"); carried != 1 || got[len(got)-1] != "alice: and then?" {
		t.Fatalf("%d turns brought the injected text; the next turn's model was asked %q; want it in one turn", carried, got)
	}
	waitUntil(t, "an empty journal", func() bool {
		p, err := db.Pending()
		return err == nil && len(p) == 0
	})
}

// A message the admin API injects for the group's old id once the group became a
// supergroup goes to the chat under its new id: its next turn carries it.
func TestInjectToAnUpgradedGroupsOldIdReachesTheSupergroup(t *testing.T) {
	const group, super = -900, -100900
	m := newMigrateEnv(t, nil)
	m.say(t, group, "hello", "answer to alice: hello")
	m.tg.MigrateTo(group, super)
	m.tg.MigrateFrom(group, super)
	m.say(t, super, "still there?", "answer to alice: still there?")
	note := "(the build of the group's project failed)"
	body := map[string]any{"channel": "telegram", "chat_id": fmt.Sprint(group), "text": note, "deliver_as": "next_turn"}
	if code, out := apiPost(t, m.url+"/api/v1/inject", "", body); code != http.StatusAccepted {
		t.Fatalf("inject: %d %v", code, out)
	}
	m.say(t, super, "what happened?", "alice: what happened?")
	got := m.asked(t, "what happened?")
	if want := note + "\n\nalice: what happened?"; got[len(got)-1] != want {
		t.Fatalf("in the supergroup the model was asked %q; want the text injected for the old id before the message", got)
	}
}
