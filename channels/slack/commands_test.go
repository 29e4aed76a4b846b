package slack

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"gateway/channels"
	"gateway/channels/slack/slacktest"
	"gateway/internal/fakeserver"
)

// replyTo answers a delivered command as the gateway does: a lone done frame.
func replyTo(t *testing.T, ch *Channel, m *channels.Message, text string) {
	t.Helper()
	answer(t, ch, channels.TargetOf(m), channels.Frame{Type: channels.FrameDone, Text: text})
}

func TestSlashCommandsOverSocketMode(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)

	s.SlashCommand(slacktest.Command{Channel: "D40", User: user, Command: "/stop"})
	m := st.sink.Next(t)
	if m.Text() != "/stop" || m.ChatID != "D40" || m.ChatType != channels.ChatDM || m.ThreadID != "" || m.UserID != user {
		t.Fatalf("delivered %+v (%q); want /stop in the DM's conversation", m, m.Text())
	}
	eventually(t, "the command's ack", func() bool {
		envs := s.Envelopes()
		return len(envs) == 1 && envs[0].Acked
	})
	// In a DM the reply stays in the conversation (an ephemeral one would vanish).
	replyTo(t, st.ch, m, "Nothing to stop.")
	if p := s.Posted("D40"); len(p) != 1 || p[0].Text != "Nothing to stop." || p[0].ThreadTS != "" {
		t.Fatalf("posted %+v; want the command's reply in the DM", p)
	}
	if r := s.Replies("D40"); len(r) != 0 {
		t.Fatalf("private replies %+v in a DM", r)
	}
	if n := len(s.Calls("reactions.add")); n != 0 {
		t.Fatalf("%d reactions; a command is no message to react to", n)
	}

	// /status is Slack's own, so the app registers /agent-status; arguments follow.
	s.SlashCommand(slacktest.Command{Channel: "D40", User: user, Command: "/agent-status"})
	if m := st.sink.Next(t); m.Text() != "/status" {
		t.Fatalf("/agent-status delivered as %q; want /status", m.Text())
	}
	s.SlashCommand(slacktest.Command{Channel: "D40", User: user, Command: "/voice", Text: "on"})
	if m := st.sink.Next(t); m.Text() != "/voice on" {
		t.Fatalf("delivered %q; want /voice on", m.Text())
	}

	// The access policy applies as to messages: a stranger is told privately, in the ack.
	s.SlashCommand(slacktest.Command{Channel: "D41", User: "U666", Command: "/new"})
	eventually(t, "the stranger's reply", func() bool { return len(s.Replies("D41")) == 1 })
	if r := s.Replies("D41")[0]; !strings.Contains(r.Text, "U666") || r.Via != "ack" {
		t.Fatalf("stranger got %+v; want the not-allowed reply in the ack", r)
	}
	st.sink.ExpectNone(t, 300*time.Millisecond)
}

func TestSlashCommandInChannelActsOnTheLatestThread(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	root := s.ChannelMessage("C42", user, "write me a long story", true)
	q := st.sink.Next(t)
	if q.ThreadID != root {
		t.Fatalf("question in thread %q; want %q", q.ThreadID, root)
	}
	// Slack does not allow commands in threads: /stop is typed in the channel, and stops
	// the conversation the user has going there.
	s.SlashCommand(slacktest.Command{Channel: "C42", User: user, Command: "/stop"})
	m := st.sink.Next(t)
	if m.Text() != "/stop" || m.ThreadID != root || m.ChatType != channels.ChatGroup || !m.Mentioned {
		t.Fatalf("delivered %+v (%q); want /stop for the thread %s", m, m.Text(), root)
	}
	replyTo(t, st.ch, m, "Stopped.")
	if r := s.Replies("C42"); len(r) != 1 || r[0].Text != "Stopped." || r[0].User != user {
		t.Fatalf("private replies %+v", r)
	}
	if p := s.Posted("C42"); len(p) != 0 {
		t.Fatalf("posted %+v; the reply is private", p)
	}
	// The answer of a turn a command starts (a hook command's prompt) is a normal message
	// in that thread, never a thread under the command.
	answer(t, st.ch, channels.TargetOf(m),
		channels.Frame{Type: channels.FrameStart},
		channels.Frame{Type: channels.FrameDelta, Text: "Once upon a time"},
		channels.Frame{Type: channels.FrameDone, Text: "Once upon a time."})
	if p := s.Posted("C42"); len(p) != 1 || p[0].ThreadTS != root || p[0].Text != "Once upon a time." {
		t.Fatalf("posted %+v; want the answer in the thread %s", p, root)
	}
}

func TestSlashCommandsInEventsMode(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, func(c *Config) { c.Mode, c.SigningSecret, c.AppToken = ModeEvents, slacktest.SigningSecret, "" })
	commandsURL := strings.TrimSuffix(st.eventsURL, EventsPath) + CommandsPath
	s.DeliverCommandsTo(commandsURL)

	s.SlashCommand(slacktest.Command{Channel: "D43", User: user, Command: "/new", Text: "about <@U2002|bob>"})
	m := st.sink.Next(t)
	if m.Text() != "/new about @bob" {
		t.Fatalf("delivered %q; want /new about @bob", m.Text())
	}
	eventually(t, "the command's HTTP answer", func() bool { return len(s.CommandResults()) == 1 })
	if r := s.CommandResults()[0]; r.Status != http.StatusOK {
		t.Fatalf("command answered %+v; want 200", r)
	}
	replyTo(t, st.ch, m, "Started a new conversation.")
	if p := s.Posted("D43"); len(p) != 1 || p[0].Text != "Started a new conversation." {
		t.Fatalf("posted %+v", p)
	}

	form := url.Values{"command": {"/stop"}, "channel_id": {"D43"}, "user_id": {user}, "trigger_id": {"forged.1"}}
	body := []byte(form.Encode())
	for name, h := range map[string]http.Header{
		"unsigned":     {"Content-Type": {"application/x-www-form-urlencoded"}},
		"wrong secret": slacktest.Sign("not-the-secret", body, time.Now()),
		"stale":        slacktest.Sign(slacktest.SigningSecret, body, time.Now().Add(-10*time.Minute)),
	} {
		h.Set("Content-Type", "application/x-www-form-urlencoded")
		status, _, err := slacktest.Post(context.Background(), commandsURL, body, h)
		if err != nil || status != http.StatusUnauthorized {
			t.Errorf("%s: status %d, err %v; want 401", name, status, err)
		}
	}
	st.sink.ExpectNone(t, 300*time.Millisecond)

	// A correctly signed form is taken (the same request, signed).
	h := slacktest.Sign(slacktest.SigningSecret, body, time.Now())
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	if status, _, err := slacktest.Post(context.Background(), commandsURL, body, h); err != nil || status != http.StatusOK {
		t.Fatalf("signed command: status %d, err %v", status, err)
	}
	if m := st.sink.Next(t); m.Text() != "/stop" {
		t.Fatalf("delivered %q", m.Text())
	}
}

func TestSlashCommandRefusedIsAnsweredAtOnce(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	st.sink.mu.Lock()
	st.sink.failNext = 1 // the gateway is shutting down
	st.sink.mu.Unlock()
	s.SlashCommand(slacktest.Command{Channel: "D44", User: user, Command: "/stop"})
	eventually(t, "the refusal", func() bool { return len(s.Replies("D44")) == 1 })
	if r := s.Replies("D44")[0]; !strings.Contains(r.Text, "/stop") || r.Via != "ack" {
		t.Fatalf("reply %+v; want a private refusal naming the command", r)
	}
	if n := st.sink.deliveries(); n != 1 {
		t.Fatalf("%d delivery attempts; want 1", n)
	}
}

func TestThreadWordsStandForCommands(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	root := s.ChannelMessage("C45", user, "explain monads", true)
	q := st.sink.Next(t)
	answer(t, st.ch, channels.TargetOf(q), channels.Frame{Type: channels.FrameDone, Text: "A monad is..."})

	// In a thread the bot is in, "stop" needs no mention.
	s.ThreadReply("C45", root, user, "Stop", false)
	if m := st.sink.Next(t); m.Text() != "/stop" || m.ThreadID != root {
		t.Fatalf("delivered %q in %q; want /stop in the thread", m.Text(), m.ThreadID)
	}
	s.ThreadReply("C45", root, user, " new ", true)
	if m := st.sink.Next(t); m.Text() != "/new" {
		t.Fatalf("delivered %q; want /new", m.Text())
	}
	// Anything more is a message.
	s.ThreadReply("C45", root, user, "stop using jargon", false)
	if m := st.sink.Next(t); m.Text() != "stop using jargon" {
		t.Fatalf("delivered %q", m.Text())
	}
	// In a DM thread, too.
	dmRoot := s.DM("D46", user, "hello")
	st.sink.Next(t)
	s.Send(slacktest.UserMessage{Channel: "D46", ChannelType: "im", User: user, ThreadTS: dmRoot, Text: "stop"})
	if m := st.sink.Next(t); m.Text() != "/stop" || m.ThreadID != dmRoot {
		t.Fatalf("DM thread: delivered %q in %q", m.Text(), m.ThreadID)
	}
	// Outside a thread the word is just a word (a command can be typed there).
	s.DM("D46", user, "stop")
	if m := st.sink.Next(t); m.Text() != "stop" {
		t.Fatalf("top-level DM delivered %q", m.Text())
	}
	// A thread the bot is not in, without a mention, is not for the bot.
	other := s.ChannelMessage("C45", user, "people talk", false)
	s.ThreadReply("C45", other, user, "stop", false)
	st.sink.ExpectNone(t, 400*time.Millisecond)
}

// The shipped manifest registers every gateway command under a name Slack accepts, and
// the adapter maps each back; it asks for the scopes and events the adapter needs.
func TestManifestMatchesTheAdapter(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "slack-app-manifest.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Features struct {
			SlashCommands []struct {
				Command string `yaml:"command"`
			} `yaml:"slash_commands"`
		} `yaml:"features"`
		OAuth struct {
			Scopes struct {
				Bot []string `yaml:"bot"`
			} `yaml:"scopes"`
		} `yaml:"oauth_config"`
		Settings struct {
			Events struct {
				Bot []string `yaml:"bot_events"`
			} `yaml:"event_subscriptions"`
			SocketMode bool `yaml:"socket_mode_enabled"`
		} `yaml:"settings"`
	}
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	// Slack's own commands, which an app cannot register.
	reserved := []string{"/status", "/me", "/away", "/active", "/dnd", "/remind", "/msg", "/dm", "/feed", "/who",
		"/collapse", "/expand", "/leave", "/open", "/search", "/topic", "/mute", "/shortcuts", "/shrug", "/invite"}
	var got []string
	for _, c := range m.Features.SlashCommands {
		if slices.Contains(reserved, c.Command) {
			t.Errorf("the manifest registers %s, which Slack reserves", c.Command)
		}
		got = append(got, commandName(c.Command))
	}
	for _, want := range []string{"new", "stop", "status", "voice", "compact", "help"} {
		if !slices.Contains(got, want) {
			t.Errorf("no slash command reaches /%s (registered: %v)", want, got)
		}
	}
	for _, scope := range []string{"commands", "chat:write", "app_mentions:read", "im:history", "channels:history", "files:read", "files:write", "users:read"} {
		if !slices.Contains(m.OAuth.Scopes.Bot, scope) {
			t.Errorf("the manifest lacks the bot scope %s", scope)
		}
	}
	for _, ev := range []string{"app_mention", "message.im", "message.channels"} {
		if !slices.Contains(m.Settings.Events.Bot, ev) {
			t.Errorf("the manifest lacks the event %s", ev)
		}
	}
	if !m.Settings.SocketMode {
		t.Errorf("the manifest does not turn Socket Mode on (the default mode)")
	}
}

func TestCommandReplyFallsBackToAMessage(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	s.SlashCommand(slacktest.Command{Channel: "C47", User: user, Command: "/help"})
	m := st.sink.Next(t)
	if m.Text() != "/help" {
		t.Fatalf("delivered %q", m.Text())
	}
	s.FailNext(4, fakeserver.Failure{Method: "chat.postEphemeral"}) // Slack keeps failing the private reply
	replyTo(t, st.ch, m, "Commands: /new /stop")
	if n := len(s.Calls("chat.postEphemeral")); n != 4 {
		t.Fatalf("%d chat.postEphemeral attempts; want the retries of one send", n)
	}
	if p := s.Posted("C47"); len(p) != 1 || p[0].Text != "Commands: /new /stop" || p[0].ThreadTS != "" {
		t.Fatalf("posted %+v; want the reply as a message rather than lost", p)
	}
}
