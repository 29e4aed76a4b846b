package gateway

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-telegram/bot/models"

	"gateway/channels"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
	"gateway/channels/slack"
	"gateway/channels/slack/slacktest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/harness"
	"gateway/hooks"
	"gateway/internal/secret"
	"gateway/profiles"
)

// Telegram's command menu is the registry (builtins and a hook's /pop), set through the
// real go-telegram client; the menu's /pop reaches the hook command.
func TestTelegramMenuOffersHookCommands(t *testing.T) {
	needPython(t)
	tg := telegramtest.NewServer(t)
	ch, err := telegram.New(telegram.Config{Enabled: true, Token: secret.Secret(tg.Token), APIURL: tg.URL, Mode: telegram.ModePolling,
		Access: channels.Access{AllowFrom: []string{"4242"}, DMPolicy: channels.DMAllowlist}}, telegram.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, t.TempDir(), []channels.Channel{ch}, withHookDirs(t, exampleHook(t, "pop")))
	var names []string
	for _, c := range tg.Commands() {
		names = append(names, c.Command)
	}
	if got := strings.Join(names, ","); got != "new,stop,compact,status,voice,help,pop" {
		t.Fatalf("telegram menu %q", got)
	}
	tg.Send(telegramtest.Update{ChatID: 4242, From: &models.User{ID: 4242, FirstName: "Ann"}, Text: "/pop"})
	deadline := time.Now().Add(20 * time.Second)
	for {
		var texts []string
		for _, m := range tg.Messages(4242) {
			texts = append(texts, m.Text)
		}
		if strings.Contains(strings.Join(texts, "|"), "There is nothing to pop yet.") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bot posted %q", texts)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(e.fake.Requests()) != 0 {
		t.Fatal("/pop reached the model")
	}
}

// Discord: the registry becomes application commands; an INTERACTION_CREATE for /pop is
// deferred at once and answered by editing the interaction's response.
func TestDiscordApplicationCommandsReachHookCommands(t *testing.T) {
	needPython(t)
	dc := discordtest.New(t)
	ch, err := discord.New(discord.Config{Enabled: true, Token: secret.Secret(dc.Bot().Token), APIURL: dc.URL,
		Access: channels.Access{AllowFrom: []string{"4242"}, DMPolicy: channels.DMAllowlist}}, discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, t.TempDir(), []channels.Channel{ch}, withHookDirs(t, exampleHook(t, "pop")))
	var names []string
	for _, c := range dc.AppCommands(dc.Bot().ID) {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, ","); got != "new,stop,compact,status,voice,help,pop" {
		t.Fatalf("application commands %q", got)
	}
	id := dc.InjectCommand("900", "4242", "pop", "3", false)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := dc.Interaction(id)
		if r.Type == 5 && len(r.Edits) == 1 && r.Edits[0] == "There is nothing to pop yet." {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("interaction reply %+v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Someone not on allow_from is told so through the interaction, and nothing runs.
	id = dc.InjectCommand("901", "666", "status", "", false)
	for {
		if r := dc.Interaction(id); r.Type == 4 && strings.Contains(r.Text, "666") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refused interaction %+v", dc.Interaction(id))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(e.fake.Requests()) != 0 {
		t.Fatal("a command reached the model")
	}
}

// Slack: a slash command (over Socket Mode, through the real slack-go client) reaches the
// hook's command like any typed one.
func TestSlackSlashCommandReachesHookCommand(t *testing.T) {
	needPython(t)
	sl := slacktest.New(t)
	ch, err := slack.New(slack.Config{Enabled: true, BotToken: secret.Secret(slacktest.BotToken), AppToken: secret.Secret(slacktest.AppToken),
		APIURL: sl.APIURL(), Access: channels.Access{AllowFrom: []string{"U4242"}, DMPolicy: channels.DMAllowlist}}, slack.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, t.TempDir(), []channels.Channel{ch}, withHookDirs(t, exampleHook(t, "pop")))
	sl.SlashCommand(slacktest.Command{Channel: "D77", User: "U4242", Command: "/pop", Text: "2"})
	deadline := time.Now().Add(20 * time.Second)
	for {
		var texts []string
		for _, p := range sl.Posted("D77") {
			texts = append(texts, p.Text)
		}
		if slices.Contains(texts, "There is nothing to pop yet.") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("posted %q", texts)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(e.fake.Requests()) != 0 {
		t.Fatal("/pop reached the model")
	}
}

// A chat bound to a profile whose hooks add a command gets its own Telegram menu (scope
// chat); the others keep the common one.
func TestTelegramMenuPerBoundChat(t *testing.T) {
	root, pdir := stackerProfile(t)
	os.WriteFile(filepath.Join(pdir, "profile.yaml"), []byte("description: stacks\n"), 0o644)
	set, err := profiles.Load(profiles.Config{Dir: filepath.Join(root, "profiles")},
		[]profiles.Binding{{Profile: "stacker", Match: profiles.Match{Channel: "telegram", Chat: "4242"}}})
	if err != nil {
		t.Fatal(err)
	}
	tg := telegramtest.NewServer(t)
	ch, err := telegram.New(telegram.Config{Enabled: true, Token: secret.Secret(tg.Token), APIURL: tg.URL, Mode: telegram.ModePolling,
		Access: channels.Access{AllowFrom: []string{"4242"}, DMPolicy: channels.DMAllowlist}}, telegram.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	newEnvWith(t, t.TempDir(), []channels.Channel{ch}, func(c *Config, rt *Runtime, d *Deps) {
		rt.Profiles = set
		rt.Commands = NewCommandRegistry()
		hd := hooks.LoadDir(rt.Bus, filepath.Join(pdir, "hooks"), hooks.DirOptions{Registry: rt.Commands, Profile: "stacker"})
		if errs := hd.Errors(); len(errs) > 0 {
			t.Fatal(errs)
		}
		t.Cleanup(hd.Close)
	})
	names := func(cmds []models.BotCommand) string {
		var n []string
		for _, c := range cmds {
			n = append(n, c.Command)
		}
		return strings.Join(n, ",")
	}
	if got := names(tg.Commands()); got != "new,stop,compact,status,voice,help" {
		t.Fatalf("common menu %q", got)
	}
	if got := names(tg.ChatCommands("4242")); got != "new,stop,compact,status,voice,help,pop" {
		t.Fatalf("chat 4242's menu %q", got)
	}
}

// /help on Slack names the commands as Slack users type them (/agent-status: Slack keeps
// /status for itself) and says how to stop or start over in a thread.
func TestSlackHelpNamesItsOwnCommands(t *testing.T) {
	sl := slacktest.New(t)
	ch, err := slack.New(slack.Config{Enabled: true, BotToken: secret.Secret(slacktest.BotToken), AppToken: secret.Secret(slacktest.AppToken),
		APIURL: sl.APIURL(), Access: channels.Access{AllowFrom: []string{"U4242"}, DMPolicy: channels.DMAllowlist}}, slack.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	newEnvWith(t, t.TempDir(), []channels.Channel{ch})
	sl.SlashCommand(slacktest.Command{Channel: "D77", User: "U4242", Command: "/help"})
	deadline := time.Now().Add(20 * time.Second)
	for {
		var help string
		for _, p := range sl.Posted("D77") {
			if strings.HasPrefix(p.Text, "Commands:") {
				help = p.Text
			}
		}
		if help != "" {
			if !strings.Contains(help, "/agent-status") || strings.Contains(help, "\n/status") || !strings.Contains(help, "write stop or new") {
				t.Fatalf("/help on Slack:\n%s\nwant /agent-status, no /status, and the thread words", help)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no help posted: %+v", sl.Posted("D77"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A reload that takes a profile's hook command away, or a chat's binding, takes it off that
// chat's Telegram menu too: the chat's own menu outranks the common one, so leaving it as
// it was would keep offering a command that no longer exists.
func TestTelegramChatMenuFollowsAReload(t *testing.T) {
	root, pdir := stackerProfile(t)
	bind := func(chats ...string) *profiles.Set {
		var bs []profiles.Binding
		for _, c := range chats {
			bs = append(bs, profiles.Binding{Profile: "stacker", Match: profiles.Match{Channel: "telegram", Chat: c}})
		}
		set, err := profiles.Load(profiles.Config{Dir: filepath.Join(root, "profiles")}, bs)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	withPop := func(rt *Runtime) {
		rt.Commands = NewCommandRegistry()
		hd := hooks.LoadDir(rt.Bus, filepath.Join(pdir, "hooks"), hooks.DirOptions{Registry: rt.Commands, Profile: "stacker"})
		if errs := hd.Errors(); len(errs) > 0 {
			t.Fatal(errs)
		}
		t.Cleanup(hd.Close)
	}
	tg := telegramtest.NewServer(t)
	e := newEnvWith(t, t.TempDir(), []channels.Channel{menuTelegram(t, tg)}, func(c *Config, rt *Runtime, d *Deps) {
		rt.Profiles = bind("4242", "777")
		withPop(rt)
	})
	for _, chat := range []string{"4242", "777"} {
		if got := names(tg.ChatCommands(chat)); got != withStack {
			t.Fatalf("before the reload, chat %s's menu %q", chat, got)
		}
	}

	// The profile's hook folder is removed; chat 777 loses its binding.
	if err := os.RemoveAll(filepath.Join(pdir, "hooks")); err != nil {
		t.Fatal(err)
	}
	rt := &Runtime{Bus: hooks.NewBus(hooks.Options{Timeout: 5 * time.Second}), Profiles: bind("4242"),
		LLM: harness.Config{Provider: "fake", Model: "fake-1"}, Commands: NewCommandRegistry()}
	e.g.Swap(rt)
	if got := names(tg.Commands()); got != common {
		t.Fatalf("common menu after the reload %q", got)
	}
	for _, chat := range []string{"4242", "777"} {
		if got := names(tg.ChatCommands(chat)); got != common {
			t.Errorf("after the reload, chat %s's menu %q; want %q", chat, got, common)
		}
	}
}

// stackerProfile is a profiles folder under root holding the profile "stacker" (in pdir),
// whose hooks add the example command /pop.
func stackerProfile(t *testing.T) (root, pdir string) {
	needPython(t)
	root = t.TempDir()
	pdir = filepath.Join(root, "profiles", "stacker")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(pdir, "hooks"), os.DirFS(exampleHook(t, "pop"))); err != nil {
		t.Fatal(err)
	}
	return root, pdir
}

const common, withStack = "new,stop,compact,status,voice,help", "new,stop,compact,status,voice,help,pop"

// menuTelegram is a Telegram channel on tg whose menus the menu tests read.
func menuTelegram(t *testing.T, tg *telegramtest.Server) *telegram.Channel {
	ch, err := telegram.New(telegram.Config{Enabled: true, Token: secret.Secret(tg.Token), APIURL: tg.URL, Mode: telegram.ModePolling,
		Access: channels.Access{AllowFrom: []string{"4242"}, DMPolicy: channels.DMAllowlist}}, telegram.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// names lists a menu's commands.
func names(cmds []models.BotCommand) string {
	var n []string
	for _, c := range cmds {
		n = append(n, c.Command)
	}
	return strings.Join(n, ",")
}

// A chat whose binding was removed while the gateway was down gets the common menu back at
// the next start: the chat's own menu, given by the last run, outranks the common one and
// would keep offering the profile's commands in that chat.
func TestTelegramChatMenuFollowsARestart(t *testing.T) {
	root, pdir := stackerProfile(t)
	dir := t.TempDir()
	db := openState(t, dir)
	defer db.Close()
	tg := telegramtest.NewServer(t)
	set, err := profiles.Load(profiles.Config{Dir: filepath.Join(root, "profiles")},
		[]profiles.Binding{{Profile: "stacker", Match: profiles.Match{Channel: "telegram", Chat: "4242"}}})
	if err != nil {
		t.Fatal(err)
	}
	first := newEnvWith(t, t.TempDir(), []channels.Channel{menuTelegram(t, tg)}, withDurable(db), func(c *Config, rt *Runtime, d *Deps) {
		rt.Profiles = set
		rt.Commands = NewCommandRegistry()
		hd := hooks.LoadDir(rt.Bus, filepath.Join(pdir, "hooks"), hooks.DirOptions{Registry: rt.Commands, Profile: "stacker"})
		if errs := hd.Errors(); len(errs) > 0 {
			t.Fatal(errs)
		}
		t.Cleanup(hd.Close)
	})
	if got := names(tg.ChatCommands("4242")); got != withStack {
		t.Fatalf("the bound chat's menu %q; want %q", got, withStack)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.g.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// Started again with the binding gone.
	newEnvWith(t, t.TempDir(), []channels.Channel{menuTelegram(t, tg)}, withDurable(db))
	if got := names(tg.ChatCommands("4242")); got != common {
		t.Errorf("after the restart the chat's menu is %q; want the common %q", got, common)
	}
}

// On Telegram, which shows no status line, a hook command's text given with a prompt is a
// message of its own, before the model's answer.
func TestTelegramHookCommandTextWithAPromptIsAMessage(t *testing.T) {
	tg := telegramtest.NewServer(t)
	ch, err := telegram.New(telegram.Config{Enabled: true, Token: secret.Secret(tg.Token), APIURL: tg.URL, Mode: telegram.ModePolling,
		Access: channels.Access{AllowFrom: []string{"4242"}, DMPolicy: channels.DMAllowlist}}, telegram.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "brief"), 0o755)
	os.WriteFile(filepath.Join(root, "brief", "HOOK.yaml"), []byte("commands: [{name: brief, description: a briefing}]\ncommand: [./run.sh]\n"), 0o644)
	os.WriteFile(filepath.Join(root, "brief", "run.sh"), []byte("#!/bin/sh\ncat >/dev/null\necho '{\"text\":\"Fetching the news first.\",\"prompt\":\"brief me\"}'\n"), 0o755)
	e := newEnvWith(t, t.TempDir(), []channels.Channel{ch}, withHookDirs(t, root))
	e.fake.SetFunc(func(*harness.Request) harness.FakeReply { return harness.FakeReply{Text: "Here is the news."} })
	tg.Send(telegramtest.Update{ChatID: 4242, From: &models.User{ID: 4242, FirstName: "Ann"}, Text: "/brief"})
	var texts []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		texts = texts[:0]
		for _, m := range tg.Messages(4242) {
			texts = append(texts, m.Text)
		}
		if slices.Contains(texts, "Here is the news.") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bot posted %q", texts)
		}
	}
	if i := slices.Index(texts, "Fetching the news first."); i < 0 || i > slices.Index(texts, "Here is the news.") {
		t.Fatalf("bot posted %q; want the command's text, then the answer", texts)
	}
}
