package gatewaycli

// End-to-end tests of durable intake and state (issue 12): `gateway run` is a real child
// process (this test binary, re-executed: see TestMain), configured by a file with relative
// paths and no environment, against the fake Telegram, Discord, Slack and OpenAI servers over
// real HTTP and WebSocket on 127.0.0.1. The tests kill it with SIGKILL and start it again on
// the same state_dir.

import (
	"go.uber.org/goleak"

	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gateway/channels/channeltest"
	"gateway/channels/discord/discordtest"
	"gateway/channels/slack/slacktest"
	"gateway/channels/telegram/telegramtest"
	"gateway/harness/openaitest"
	"gateway/hooks"
	"gateway/state"
)

// childEnv makes the test binary act as the gateway command (`gateway run ...`).
const childEnv = "GATEWAYCLI_TEST_AS_GATEWAY"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		// What cmd/gateway's main does, with no environment passed to the config.
		ctx, stop := Signals()
		code := Run(ctx, nil, os.Args[1:], os.Stdout, os.Stderr, nil)
		stop()
		os.Exit(code)
	}
	if os.Getenv(mcpServerEnv) == "1" {
		serveTestMCP()
	}
	goleak.VerifyTestMain(m) // every gateway a test ran in-process has stopped all it started
}

// slowModel is the fake OpenAI API: it answers "answer N" to the N-th call, and the calls
// whose number is in slow only after a minute (a kill arrives first).
type slowModel struct {
	*openaitest.Server
	n    atomic.Int64
	slow map[int64]bool
}

func newSlowModel(t *testing.T, slow ...int64) *slowModel {
	m := &slowModel{Server: openaitest.NewServer(), slow: map[int64]bool{}}
	for _, n := range slow {
		m.slow[n] = true
	}
	m.SetFunc(func(openaitest.Request) openaitest.Reply {
		n := m.n.Add(1)
		r := openaitest.Reply{Text: fmt.Sprintf("answer %d", n)}
		if m.slow[n] {
			r.Delay = time.Minute
		}
		return r
	})
	t.Cleanup(m.Close)
	return m
}

func (m *slowModel) calls() int { return len(m.Requests()) }

// child is `gateway run` as a separate process, in root, with root/gateway.yaml.
type child struct {
	t    testing.TB
	root string
	addr string
	cmd  *exec.Cmd
	log  *channeltest.LogBuffer
	done chan struct{}
}

// writeChildConfig writes root/gateway.yaml: relative state_dir, JSON logs, the model at
// oaiURL and the channels section given.
func writeChildConfig(t testing.TB, root, addr, oaiURL, channelsYAML string) {
	t.Helper()
	yaml := fmt.Sprintf(`state_dir: ./data
http:
  listen: %s
log:
  level: debug
  format: json
llm:
  provider: openai
  model: test-model
  base_url: %s
  api_key: sk-test
  max_retries: 0
channels:
%s`, addr, oaiURL, channelsYAML)
	if err := os.WriteFile(filepath.Join(root, "gateway.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startChild starts the gateway and waits until /readyz answers 200.
func startChild(t testing.TB, root, addr string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, root: root, addr: addr, log: &channeltest.LogBuffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(exe, "run", "--config", "gateway.yaml")
	c.cmd.Dir = root
	c.cmd.Env = []string{childEnv + "=1", "PATH=" + os.Getenv("PATH"), "HOME=" + root}
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(c.kill)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c
			}
		}
		select {
		case <-c.done:
			t.Fatalf("the gateway exited before it was ready; log:\n%s", c.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway was not ready within 20s; log:\n%s", c.log)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// kill ends the process with SIGKILL: no shutdown code runs.
func (c *child) kill() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Kill()
	<-c.done
}

// stop ends the process with SIGTERM and waits for a clean exit.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.t.Errorf("the gateway did not stop within 30s; log:\n%s", c.log)
		c.kill()
	}
	// Under -race the child is race-enabled too; what it finds is in its log only.
	if strings.Contains(c.log.String(), "WARNING: DATA RACE") {
		c.t.Errorf("the gateway process found a data race; log:\n%s", c.log)
	}
}

// waitFor polls cond for up to 20s.
func waitFor(t testing.TB, what string, cond func() bool, log fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s; log:\n%s", what, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quiet gives a wrong second answer or model call time to show up.
func quiet() { time.Sleep(1500 * time.Millisecond) }

// killAtPreviewAndRestart kills g once the answer's preview shows and its place is kept
// (cutModel's first answer), starts the gateway again and checks that the chat then shows
// one message: the full answer in place of the cut preview. It returns the new gateway.
func killAtPreviewAndRestart(t *testing.T, p platform, g *child) *child {
	t.Helper()
	waitFor(t, "the preview shows", func() bool { return len(p.answer()) == 1 }, g.log)
	waitFor(t, "its place is kept", func() bool { return strings.Contains(g.log.String(), "answer placement kept") }, g.log)
	g.kill()
	if got := p.answer(); len(got) != 1 || !strings.Contains(got[0], "The cut preview") {
		t.Fatalf("before the restart the chat shows %q; want the cut preview", got)
	}
	g = startChild(t, g.root, g.addr)
	waitFor(t, "answered after the restart", func() bool {
		return slices.ContainsFunc(p.answer(), func(s string) bool { return strings.Contains(s, "answer 2") })
	}, g.log)
	quiet()
	if got := p.answer(); len(got) != 1 || !strings.Contains(got[0], "answer 2") {
		t.Fatalf("after the restart the chat shows %q; want one message, the full answer in place of the cut preview; log:\n%s", got, g.log)
	}
	return g
}

// platform is what a test does with one fake platform.
type platform struct {
	name   string
	config func(addr string) string // the channels: section; addr is the gateway's http.listen
	send   func(text string)        // a user's message
	resend func()                   // the platform delivers the last message again (same ids)
	answer func() []string          // the bot's answers so far
	acked  func() bool              // the platform saw everything it sent acknowledged (nil: no such notion)
	fake   func() fmt.Stringer      // for failure messages
}

const (
	tgChat     = 4242
	dcUser     = "91000000000000001"
	dcChannel  = "92000000000000001"
	slackUser  = "U0000USER"
	slackDM    = "D0000DM01"
	slackGroup = "C0000CHAN"
)

func telegramPlatform(t *testing.T) platform {
	tg := telegramtest.NewServer(t)
	// The user started the bot: the admin may write there before they do (an inject).
	tg.AddChat(tgChat)
	var lastMsg int
	return platform{
		name: "telegram",
		config: func(string) string {
			return fmt.Sprintf("  telegram:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\n",
				telegramtest.Token, tg.URL, fmt.Sprint(telegramtest.UserID))
		},
		send: func(text string) { _, lastMsg = tg.Send(telegramtest.Update{ChatID: tgChat, Text: text}) },
		// A polling bot gets an update again when its offset did not reach Telegram: the
		// same message, as a new update (telegramtest.Redeliver's doc).
		resend: func() { tg.Send(telegramtest.Update{ChatID: tgChat, MessageID: lastMsg, Text: "again"}) },
		acked:  func() bool { return tg.Pending() == 0 }, // the offset moved past every update
		answer: func() []string {
			var out []string
			for _, m := range tg.Messages(tgChat) {
				out = append(out, m.Text)
			}
			return out
		},
	}
}

func discordPlatform(t *testing.T) platform {
	dc := discordtest.New(t)
	var last string
	return platform{
		name: "discord",
		config: func(string) string {
			return fmt.Sprintf("  discord:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\n",
				dc.Bot().Token, dc.URL, dcUser)
		},
		send:   func(text string) { last = dc.InjectDM(dcChannel, dcUser, text) },
		resend: func() { dc.Inject(discordtest.Incoming{ID: last}) },
		answer: func() []string {
			var out []string
			for _, m := range dc.PostedBy(dc.Bot().ID, dcChannel) {
				out = append(out, m.Content)
			}
			return out
		},
	}
}

// telegramWebhookPlatform is Telegram in webhook mode: there a redelivery carries the same
// update_id (Telegram posts an update again when it did not see a 2xx).
func telegramWebhookPlatform(t *testing.T) platform {
	tg := telegramtest.NewServer(t)
	var lastUpdate int64
	return platform{
		name: "telegram-webhook",
		config: func(addr string) string {
			return fmt.Sprintf("  telegram:\n    enabled: true\n    mode: webhook\n    token: %q\n    api_url: %s\n    webhook_url: http://%s/telegram/webhook\n    webhook_secret: hook-secret-0123456789\n    allow_from: [%q]\n",
				telegramtest.Token, tg.URL, addr, fmt.Sprint(telegramtest.UserID))
		},
		send:   func(text string) { lastUpdate, _ = tg.Send(telegramtest.Update{ChatID: tgChat, Text: text}) },
		resend: func() { tg.Redeliver(lastUpdate) },
		acked:  func() bool { return tg.Pending() == 0 }, // answered 200
		answer: func() []string {
			var out []string
			for _, m := range tg.Messages(tgChat) {
				out = append(out, m.Text)
			}
			return out
		},
	}
}

func slackPlatform(t *testing.T, sl *slacktest.Server) platform {
	var last string
	return platform{
		name: "slack",
		config: func(string) string {
			return fmt.Sprintf("  slack:\n    enabled: true\n    bot_token: %q\n    app_token: %q\n    api_url: %s\n    allow_from: [%q]\n",
				slacktest.BotToken, slacktest.AppToken, sl.APIURL(), slackUser)
		},
		send:   func(text string) { last = sl.DM(slackDM, slackUser, text) },
		resend: func() { sl.Redeliver(slackDM, last) },
		acked: func() bool {
			for _, e := range sl.Envelopes() {
				if !e.Acked {
					return false
				}
			}
			return true
		},
		answer: func() []string {
			var out []string
			for _, p := range sl.Posted(slackDM) {
				out = append(out, p.Text)
			}
			return out
		},
	}
}

func platforms(t *testing.T) []func(*testing.T) platform {
	return []func(*testing.T) platform{
		telegramPlatform,
		telegramWebhookPlatform,
		discordPlatform,
		func(t *testing.T) platform { return slackPlatform(t, slacktest.New(t)) },
	}
}

func newRoot(t *testing.T, oai *slowModel, p platform, extra ...string) (root, addr string) {
	root, addr = t.TempDir(), freePort(t)
	writeChildConfig(t, root, addr, oai.URL(), p.config(addr)+strings.Join(extra, ""))
	return root, addr
}

// A SIGKILL during a slow model call, then a restart on the same state_dir: the message is
// answered, once, with one model call after the restart.
func TestKillDuringModelCallIsAnsweredOnceAfterRestart(t *testing.T) {
	for _, mk := range platforms(t) {
		p := mk(t)
		t.Run(p.name, func(t *testing.T) {
			oai := newSlowModel(t, 1)
			root, addr := newRoot(t, oai, p)
			g := startChild(t, root, addr)
			p.send("hello there")
			waitFor(t, "the model is called", func() bool { return oai.calls() == 1 }, g.log)
			g.kill()
			if got := p.answer(); len(got) != 0 {
				t.Fatalf("answered before the kill: %q", got)
			}

			g = startChild(t, root, addr)
			waitFor(t, "the message is answered after the restart", func() bool { return len(p.answer()) > 0 }, g.log)
			quiet()
			if got := p.answer(); len(got) != 1 || !strings.Contains(got[0], "answer 2") {
				t.Fatalf("answers after restart = %q; want one, \"answer 2\"; log:\n%s", got, g.log)
			}
			if n := oai.calls(); n != 2 {
				t.Fatalf("model calls = %d; want the killed one and one after the restart", n)
			}
			if u := lastUser(oai.Requests()[1]); u != "hello there" {
				t.Fatalf("after the restart the model was asked %q", u)
			}
			g.stop()
		})
	}
}

// A SIGKILL after the answer was delivered: the restarted gateway does not answer again,
// and the platform delivering the same message again (same ids) is dropped.
func TestAnsweredThenKilledIsNotAnsweredAgainAndRedeliveryIsDropped(t *testing.T) {
	for _, mk := range platforms(t) {
		p := mk(t)
		t.Run(p.name, func(t *testing.T) {
			oai := newSlowModel(t)
			root, addr := newRoot(t, oai, p)
			g := startChild(t, root, addr)
			p.send("hello there")
			waitFor(t, "answered", func() bool { return len(p.answer()) == 1 }, g.log)
			// The journal lets go once done reached the platform.
			waitFor(t, "settled", func() bool { return strings.Contains(g.log.String(), "message settled") }, g.log)
			g.kill()

			g = startChild(t, root, addr)
			quiet()
			if got, n := p.answer(), oai.calls(); len(got) != 1 || n != 1 {
				t.Fatalf("after the restart: answers %q, model calls %d; want the one from before only", got, n)
			}
			if p.name == "discord" {
				// Discord never redelivers; a resumed session's replay is the adapter's dedup.
				g.stop()
				return
			}
			p.resend()
			quiet()
			if got, n := p.answer(), oai.calls(); len(got) != 1 || n != 1 {
				t.Fatalf("after a redelivery: answers %q, model calls %d; want it dropped; log:\n%s", got, n, g.log)
			}
			if !strings.Contains(g.log.String(), "dropped a message accepted before") {
				t.Fatalf("the redelivery was not dropped by the dedup window; log:\n%s", g.log)
			}
			// Dropped, yet acknowledged: the platform stops sending it.
			waitFor(t, "the redelivery is acknowledged", p.acked, g.log)
			g.stop()
		})
	}
}

// A Slack thread the bot answered in is still followed without a mention after a restart.
func TestSlackThreadFollowedAfterRestart(t *testing.T) {
	sl := slacktest.New(t)
	p := slackPlatform(t, sl)
	oai := newSlowModel(t)
	root, addr := newRoot(t, oai, p)
	g := startChild(t, root, addr)
	ts := sl.ChannelMessage(slackGroup, slackUser, "hello all", true)
	waitFor(t, "answered in the thread", func() bool {
		for _, m := range sl.Posted(slackGroup) {
			if m.ThreadTS == ts {
				return true
			}
		}
		return false
	}, g.log)
	waitFor(t, "settled", func() bool { return strings.Contains(g.log.String(), "message settled") }, g.log)
	g.kill()

	g = startChild(t, root, addr)
	sl.ThreadReply(slackGroup, ts, slackUser, "and one more thing", false)
	waitFor(t, "the reply without a mention is answered", func() bool { return oai.calls() == 2 }, g.log)
	if u := lastUser(oai.Requests()[1]); !strings.Contains(u, "and one more thing") {
		t.Fatalf("the model was asked %q", u)
	}
	waitFor(t, "the second answer is in the thread", func() bool {
		n := 0
		for _, m := range sl.Posted(slackGroup) {
			if m.ThreadTS == ts {
				n++
			}
		}
		return n == 2
	}, g.log)
	g.stop()
}

// /voice off is a per-chat setting: it survives a restart of the process.
func TestVoiceOffSurvivesRestart(t *testing.T) {
	p := telegramPlatform(t)
	oai := newSlowModel(t)
	// Voice replies need a speech program: one that writes nothing is enough here.
	root, addr := newRoot(t, oai, p, "tts:\n  mode: inbound\n  provider: command\n  command: [\"true\", \"{output}\", \"{text}\"]\n")
	g := startChild(t, root, addr)
	p.send("/voice off")
	waitFor(t, "the command is answered", func() bool { return len(p.answer()) == 1 }, g.log)
	g.stop()

	g = startChild(t, root, addr)
	p.send("/voice")
	waitFor(t, "the command is answered", func() bool { return len(p.answer()) == 2 }, g.log)
	if got := p.answer()[1]; !strings.Contains(strings.ToLower(got), "off") {
		t.Fatalf("/voice after the restart says %q; want off", got)
	}
	g.stop()
}

// A truncated state file: the gateway warns in plain words, moves it aside, starts with
// empty state and serves.
func TestTruncatedStateFileStartsFresh(t *testing.T) {
	p := telegramPlatform(t)
	oai := newSlowModel(t)
	root, addr := newRoot(t, oai, p)
	g := startChild(t, root, addr)
	p.send("first")
	waitFor(t, "answered", func() bool { return len(p.answer()) == 1 }, g.log)
	g.stop()

	path := filepath.Join(root, "data", state.FileName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()/3); err != nil {
		t.Fatal(err)
	}
	g = startChild(t, root, addr)
	if !strings.Contains(g.log.String(), "the state file could not be read and was moved aside") {
		t.Fatalf("no plain warning about the state file; log:\n%s", g.log)
	}
	aside, _ := filepath.Glob(path + ".broken-*")
	if len(aside) != 1 {
		t.Fatalf("the broken file was not kept aside: %v", aside)
	}
	p.send("second")
	waitFor(t, "answered on fresh state", func() bool { return len(p.answer()) == 2 }, g.log)
	g.stop()
}

// cutModel is the fake OpenAI API whose first call streams "The cut preview" and then
// hangs (a kill arrives meanwhile); every later call answers "answer N".
func cutModel(t *testing.T) *slowModel {
	m := &slowModel{Server: openaitest.NewServer()}
	m.SetFunc(func(openaitest.Request) openaitest.Reply {
		if n := m.n.Add(1); n > 1 {
			return openaitest.Reply{Text: fmt.Sprintf("answer %d", n)}
		}
		return openaitest.Reply{Chunks: []string{"The cut preview"}, Hang: true}
	})
	t.Cleanup(m.Close)
	return m
}

// A SIGKILL while the answer streams leaves a cut preview in the chat; after the restart
// the full answer takes its place, in the same message: the chat shows one answer, whole.
func TestKillMidStreamFinishesTheCutPreviewAfterRestart(t *testing.T) {
	for _, mk := range []func(*testing.T) platform{telegramPlatform, discordPlatform,
		func(t *testing.T) platform { return slackPlatform(t, slacktest.New(t)) }} {
		p := mk(t)
		t.Run(p.name, func(t *testing.T) {
			oai := cutModel(t)
			root, addr := newRoot(t, oai, p)
			g := startChild(t, root, addr)
			p.send("hello there")
			g = killAtPreviewAndRestart(t, p, g)
			g.stop()
		})
	}
}

// When the cut preview was deleted meanwhile (or is too old to edit), the answer after the
// restart comes as a new message.
func TestKillMidStreamWithThePreviewDeletedAnswersInANewMessage(t *testing.T) {
	tg := telegramtest.NewServer(t)
	oai := cutModel(t)
	root, addr := t.TempDir(), freePort(t)
	writeChildConfig(t, root, addr, oai.URL(), fmt.Sprintf("  telegram:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\n",
		telegramtest.Token, tg.URL, fmt.Sprint(telegramtest.UserID)))
	g := startChild(t, root, addr)
	tg.Send(telegramtest.Update{ChatID: tgChat, Text: "hello there"})
	waitFor(t, "the preview shows", func() bool { return len(tg.Messages(tgChat)) == 1 }, g.log)
	waitFor(t, "its place is kept", func() bool { return strings.Contains(g.log.String(), "answer placement kept") }, g.log)
	g.kill()
	preview := tg.Messages(tgChat)[0]
	if !tg.Delete(tgChat, preview.ID) {
		t.Fatal("the preview could not be deleted")
	}

	g = startChild(t, root, addr)
	waitFor(t, "answered after the restart", func() bool { return len(tg.Messages(tgChat)) > 0 }, g.log)
	quiet()
	got := tg.Messages(tgChat)
	if len(got) != 1 || got[0].Text != "answer 2" || got[0].ID == preview.ID {
		t.Fatalf("after the restart the chat shows %+v; want the answer once, in a new message; log:\n%s", got, g.log)
	}
	g.stop()
}

// userTurns are the user messages of a model request, in order.
func userTurns(r openaitest.Request) []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == "user" {
			out = append(out, m.Content)
		}
	}
	return out
}

// A SIGKILL after the model's answer was saved in the history but before it reached the
// chat (a message:send hook still working, as text to speech does): after the restart the
// model is asked the message once, as the first time, not the question twice with the cut
// answer between; and the conversation goes on from the answer the chat got.
func TestKilledAfterTheAnswerWasSavedAsksTheModelOnce(t *testing.T) {
	tg := telegramtest.NewServer(t)
	oai := newSlowModel(t)
	root, addr := t.TempDir(), freePort(t)
	started := filepath.Join(root, "hook-started")
	// The first time, the hook holds the answer back past the kill; after the restart it adds nothing.
	writeHook(t, filepath.Join(root, "hooks"), "speak", sendYAML+"timeout: 2m\n",
		fmt.Sprintf("cat >/dev/null\n[ -f %[1]q ] && exit 0\ntouch %[1]q\nsleep 60\n", started))
	writeChildConfig(t, root, addr, oai.URL(), fmt.Sprintf("  telegram:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\nhooks:\n  dirs: [./hooks]\n",
		telegramtest.Token, tg.URL, fmt.Sprint(telegramtest.UserID)))
	g := startChild(t, root, addr)
	tg.Send(telegramtest.Update{ChatID: tgChat, Text: "hello there"})
	waitFor(t, "the message:send hook runs", func() bool { _, err := os.Stat(started); return err == nil }, g.log)
	g.kill()

	g = startChild(t, root, addr)
	waitFor(t, "answered after the restart", func() bool {
		got := tg.Messages(tgChat)
		return len(got) == 1 && got[0].Text == "answer 2"
	}, g.log)
	tg.Send(telegramtest.Update{ChatID: tgChat, Text: "and then?"})
	waitFor(t, "the next message answered", func() bool { return oai.calls() == 3 }, g.log)
	reqs := oai.Requests()
	if got := userTurns(reqs[1]); !slices.Equal(got, []string{"hello there"}) {
		t.Errorf("after the restart the model was asked %q; want the message once", got)
	}
	var asked []string
	for _, m := range reqs[2].Messages {
		if m.Role != "system" {
			asked = append(asked, m.Role+": "+m.Content)
		}
	}
	if want := []string{"user: hello there", "assistant: answer 2", "user: and then?"}; !slices.Equal(asked, want) {
		t.Errorf("the next message was asked with the conversation %q; want %q", asked, want)
	}
	g.stop()
}

// A SIGKILL while the parts a message:send hook added are being sent (its note is posted,
// its file still uploading): after the restart the chat shows the answer, the note and the
// file once each, not the note a second time beside the first.
func TestKilledWhileTheAnswersPartsAreSentShowsEachPartOnce(t *testing.T) {
	tg := telegramtest.NewServer(t)
	oai := newSlowModel(t)
	root, addr := t.TempDir(), freePort(t)
	file := filepath.Join(root, "report.txt")
	writeFile(t, file, "the report")
	writeHook(t, filepath.Join(root, "hooks"), "attach", sendYAML,
		fmt.Sprintf("cat >/dev/null\necho '{\"parts\":[{\"type\":\"text\",\"text\":\"Here is the report.\"},{\"type\":\"file\",\"mime\":\"text/plain\",\"path\":%q,\"name\":\"report.txt\"}]}'\n", file))
	writeChildConfig(t, root, addr, oai.URL(), fmt.Sprintf("  telegram:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\nhooks:\n  dirs: [./hooks]\n",
		telegramtest.Token, tg.URL, fmt.Sprint(telegramtest.UserID)))
	tg.Slow("sendDocument", time.Minute) // the kill comes while the file uploads
	g := startChild(t, root, addr)
	tg.Send(telegramtest.Update{ChatID: tgChat, Text: "send me the report"})
	waitFor(t, "the note is posted", func() bool {
		return slices.ContainsFunc(tg.Messages(tgChat), func(m telegramtest.Message) bool { return m.Text == "Here is the report." })
	}, g.log)
	time.Sleep(500 * time.Millisecond) // the gateway's own time to take Telegram's answer in: a crash before that cannot know the note was sent
	g.kill()
	tg.Slow("sendDocument", 0)

	g = startChild(t, root, addr)
	waitFor(t, "the file is sent after the restart", func() bool { return len(tg.Calls("sendDocument")) > 0 }, g.log)
	quiet()
	var got []string
	for _, m := range tg.Messages(tgChat) {
		got = append(got, m.Kind+": "+m.Text)
	}
	if want := []string{"text: answer 2", "text: Here is the report.", "document: "}; !slices.Equal(got, want) {
		t.Fatalf("after the restart the chat shows %q; want %q; log:\n%s", got, want, g.log)
	}
	g.stop()
}

// The same on Slack: a SIGKILL while the file a message:send hook added uploads, its note
// posted; after the restart the DM shows the answer, the note and the file once each.
func TestSlackKilledWhileTheAnswersPartsAreSentShowsEachPartOnce(t *testing.T) {
	sl := slacktest.New(t)
	p := slackPlatform(t, sl)
	oai := newSlowModel(t)
	root, addr := t.TempDir(), freePort(t)
	file := filepath.Join(root, "report.txt")
	writeFile(t, file, "the report")
	writeHook(t, filepath.Join(root, "hooks"), "attach", sendYAML,
		fmt.Sprintf("cat >/dev/null\necho '{\"parts\":[{\"type\":\"text\",\"text\":\"Here is the report.\"},{\"type\":\"file\",\"mime\":\"text/plain\",\"path\":%q,\"name\":\"report.txt\"}]}'\n", file))
	writeChildConfig(t, root, addr, oai.URL(), p.config(addr)+"hooks:\n  dirs: [./hooks]\n")
	sl.Slow("files.upload", time.Minute) // the kill comes while the file uploads
	g := startChild(t, root, addr)
	p.send("send me the report")
	// The upload begins once the note is posted and its place kept.
	waitFor(t, "the file's upload begins", func() bool { return len(sl.Calls("files.getUploadURLExternal")) > 0 }, g.log)
	g.kill()
	if got := p.answer(); !slices.Contains(got, "Here is the report.") {
		t.Fatalf("before the restart the DM shows %q; want the note", got)
	}
	sl.Slow("files.upload", 0)

	g = startChild(t, root, addr)
	shared := func() []slacktest.Posted {
		return slices.DeleteFunc(sl.Posted(slackDM), func(m slacktest.Posted) bool { return len(m.Files) == 0 })
	}
	waitFor(t, "the file is shared after the restart", func() bool { return len(shared()) > 0 }, g.log)
	quiet()
	var got []string
	for _, m := range sl.Posted(slackDM) {
		s := "text: " + m.Text
		for _, f := range m.Files {
			s = "file: " + f.Name
		}
		got = append(got, s)
	}
	if want := []string{"text: answer 2", "text: Here is the report.", "file: report.txt"}; !slices.Equal(got, want) {
		t.Fatalf("after the restart the DM shows %q; want %q; log:\n%s", got, want, g.log)
	}
	g.stop()
}

// noteHook writes hooks/note: the command /note, whose program records each run in
// root/runs and answers "noted: ARGS"; while root/hold exists, it waits (a kill comes).
func noteHook(t *testing.T, root string) (runs string) {
	runs = filepath.Join(root, "runs")
	writeHook(t, filepath.Join(root, "hooks"), "note",
		"commands:\n  - {name: note, description: Note something down}\ncommand: [./run.sh]\n",
		fmt.Sprintf("cat >/dev/null\necho ran >> %q\nwhile [ -f %q ]; do sleep 0.1; done\necho '{\"text\":\"noted: buy milk\"}'\n",
			runs, filepath.Join(root, "hold")))
	return runs
}

// A SIGKILL while a hook's command runs: after the restart the command runs again and
// the chat gets its answer, once. (Before, the message left the intake journal when the
// command was queued, so the chat never got an answer.)
func TestKilledWhileAHookCommandRunsAnswersItAfterRestart(t *testing.T) {
	tg := telegramtest.NewServer(t)
	oai := newSlowModel(t)
	root, addr := t.TempDir(), freePort(t)
	runs := noteHook(t, root)
	writeFile(t, filepath.Join(root, "hold"), "")
	writeChildConfig(t, root, addr, oai.URL(), fmt.Sprintf("  telegram:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\nhooks:\n  dirs: [./hooks]\n",
		telegramtest.Token, tg.URL, fmt.Sprint(telegramtest.UserID)))
	g := startChild(t, root, addr)
	tg.Send(telegramtest.Update{ChatID: tgChat, Text: "/note buy milk"})
	waitFor(t, "the command's program runs", func() bool { _, err := os.Stat(runs); return err == nil }, g.log)
	g.kill()
	if err := os.Remove(filepath.Join(root, "hold")); err != nil {
		t.Fatal(err)
	}

	g = startChild(t, root, addr)
	waitFor(t, "the command is answered after the restart", func() bool { return len(tg.Messages(tgChat)) > 0 }, g.log)
	quiet()
	var got []string
	for _, m := range tg.Messages(tgChat) {
		got = append(got, m.Text)
	}
	if !slices.Equal(got, []string{"noted: buy milk"}) {
		t.Fatalf("after the restart the chat shows %q; want the command's answer once; log:\n%s", got, g.log)
	}
	g.stop()
}

// A hook's command waiting behind an answer in progress, then a SIGKILL: after the restart
// the message is answered and then the command, in the order they were sent.
func TestKilledWithAHookCommandQueuedAnswersBothInOrderAfterRestart(t *testing.T) {
	tg := telegramtest.NewServer(t)
	oai := newSlowModel(t, 1)
	root, addr := t.TempDir(), freePort(t)
	runs := noteHook(t, root)
	writeChildConfig(t, root, addr, oai.URL(), fmt.Sprintf("  telegram:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\nhooks:\n  dirs: [./hooks]\n",
		telegramtest.Token, tg.URL, fmt.Sprint(telegramtest.UserID)))
	g := startChild(t, root, addr)
	tg.Send(telegramtest.Update{ChatID: tgChat, Text: "hello there"})
	waitFor(t, "the model is called", func() bool { return oai.calls() == 1 }, g.log)
	tg.Send(telegramtest.Update{ChatID: tgChat, Text: "/note buy milk"})
	waitFor(t, "the command is acknowledged to Telegram", func() bool { return tg.Pending() == 0 }, g.log)
	time.Sleep(500 * time.Millisecond) // the chat's actor takes the command in and queues it
	g.kill()
	if _, err := os.Stat(runs); err == nil {
		t.Fatal("the command ran before the answer in front of it")
	}

	g = startChild(t, root, addr)
	waitFor(t, "both are answered after the restart", func() bool { return len(tg.Messages(tgChat)) >= 2 }, g.log)
	quiet()
	var got []string
	for _, m := range tg.Messages(tgChat) {
		got = append(got, m.Text)
	}
	if want := []string{"answer 2", "noted: buy milk"}; !slices.Equal(got, want) {
		t.Fatalf("after the restart the chat shows %q; want %q; log:\n%s", got, want, g.log)
	}
	g.stop()
}

// A state file found empty after a SIGKILL (a failed copy or restore emptied it): the
// admin is told in plain words, and the message the intake log still holds is answered
// once, rather than lost without a word.
func TestEmptiedStateFileIsReportedAndItsUnansweredMessageAnswered(t *testing.T) {
	p := telegramPlatform(t)
	oai := newSlowModel(t, 2)
	root, addr := newRoot(t, oai, p)
	g := startChild(t, root, addr)
	p.send("first")
	waitFor(t, "answered", func() bool { return len(p.answer()) == 1 }, g.log)
	g.stop() // the intake log is applied to the state file
	g = startChild(t, root, addr)
	p.send("second")
	waitFor(t, "the model is called", func() bool { return oai.calls() == 2 }, g.log)
	g.kill()
	if err := os.Truncate(filepath.Join(root, "data", state.FileName), 0); err != nil {
		t.Fatal(err)
	}

	g = startChild(t, root, addr)
	if !strings.Contains(g.log.String(), "the state file was missing or empty") {
		t.Fatalf("no plain warning about the lost state file; log:\n%s", g.log)
	}
	waitFor(t, "the second message is answered", func() bool { return len(p.answer()) == 2 }, g.log)
	quiet()
	if got := p.answer(); !slices.Equal(got, []string{"answer 1", "answer 3"}) {
		t.Fatalf("the chat shows %q; want each message answered once; log:\n%s", got, g.log)
	}
	if u := lastUser(oai.Requests()[2]); u != "second" {
		t.Fatalf("after the restart the model was asked %q", u)
	}
	g.stop()
}

// A power cut after two answers, which left the chat's history file as its first turn made
// it (the second turn's history is not synced to the file on its own: the intake log holds
// it): after the start the next message is asked with the whole conversation, and neither
// answered message is answered again.
func TestPowerCutAfterAnswersKeepsTheConversation(t *testing.T) {
	p := telegramPlatform(t)
	oai := newSlowModel(t)
	root, addr := newRoot(t, oai, p)
	g := startChild(t, root, addr)
	p.send("first question")
	waitFor(t, "the first answer", func() bool { return len(p.answer()) == 1 }, g.log)
	// The answer shows (as its preview) before the turn saves it: wait for the history.
	historyFiles := filepath.Join(root, "data", "sessions", "*.jsonl")
	waitFor(t, "the first turn in the history file", func() bool {
		files, _ := filepath.Glob(historyFiles)
		if len(files) != 1 {
			return false
		}
		b, err := os.ReadFile(files[0])
		return err == nil && strings.Contains(string(b), "answer 1")
	}, g.log)
	files, err := filepath.Glob(historyFiles)
	if err != nil || len(files) != 1 {
		t.Fatalf("history files = %q (%v); want one", files, err)
	}
	fi, err := os.Stat(files[0])
	if err != nil {
		t.Fatal(err)
	}
	firstTurn := fi.Size() // made by the first turn, and synced as a new file is
	p.send("second question")
	waitFor(t, "the second answer", func() bool { return len(p.answer()) == 2 }, g.log)
	quiet() // the intake log's lazy sync (100 ms) has made the Done and the history durable
	g.kill()
	// What the disk kept of the history file: the second turn's pages were never synced.
	if err := os.Truncate(files[0], firstTurn); err != nil {
		t.Fatal(err)
	}

	g = startChild(t, root, addr)
	p.send("third question")
	waitFor(t, "the third answer", func() bool { return len(p.answer()) == 3 }, g.log)
	quiet()
	if got := p.answer(); !slices.Equal(got, []string{"answer 1", "answer 2", "answer 3"}) {
		t.Fatalf("the chat shows %q; want each message answered once", got)
	}
	var asked []string
	for _, m := range oai.Requests()[2].Messages {
		if m.Role != "system" {
			asked = append(asked, m.Role+": "+m.Content)
		}
	}
	want := []string{"user: first question", "assistant: answer 1", "user: second question", "assistant: answer 2", "user: third question"}
	if !slices.Equal(asked, want) {
		t.Fatalf("after the power cut the model was asked with %q; want %q; log:\n%s", asked, want, g.log)
	}
	g.stop()
}

// A state file found broken after a crash is moved aside, and the messages the intake log
// still held are answered all the same: the message cut by the crash is answered once.
func TestBrokenStateFileAfterACrashStillAnswersTheCutMessage(t *testing.T) {
	p := telegramPlatform(t)
	oai := newSlowModel(t, 1)
	root, addr := newRoot(t, oai, p)
	g := startChild(t, root, addr)
	p.send("hello there")
	waitFor(t, "the model is called", func() bool { return oai.calls() == 1 }, g.log)
	g.kill()
	path := filepath.Join(root, "data", state.FileName)
	if err := os.WriteFile(path, []byte(strings.Repeat("not a state file ", 2000)), 0o600); err != nil {
		t.Fatal(err)
	}

	g = startChild(t, root, addr)
	waitFor(t, "answered after the restart", func() bool { return len(p.answer()) > 0 }, g.log)
	quiet()
	if got := p.answer(); !slices.Equal(got, []string{"answer 2"}) {
		t.Fatalf("answers after the restart = %q; want the cut message answered once; log:\n%s", got, g.log)
	}
	if log := g.log.String(); !strings.Contains(log, "moved aside") || !strings.Contains(log, `"recovered_messages":1`) {
		t.Fatalf("no plain warning of the broken state file and the message it recovered; log:\n%s", log)
	}
	g.stop()
}

// toolModel is the fake OpenAI API of the tool tests: a conversation that ends with the
// user's message gets a call of lookup_order (its id call_N for the N-th model call), one
// that ends with a tool result gets "answer N". The calls whose number is in slow are
// answered only after a minute (a kill arrives first).
func toolModel(t *testing.T, slow ...int64) *slowModel {
	m := &slowModel{Server: openaitest.NewServer(), slow: map[int64]bool{}}
	for _, n := range slow {
		m.slow[n] = true
	}
	m.SetFunc(func(r openaitest.Request) openaitest.Reply {
		n := m.n.Add(1)
		var rep openaitest.Reply
		if r.Messages[len(r.Messages)-1].Role == "tool" {
			rep = openaitest.Reply{Text: fmt.Sprintf("answer %d", n)}
		} else {
			rep = openaitest.Reply{Chunks: []string{"Let me look."}, ToolCalls: []openaitest.ToolCall{{ID: fmt.Sprintf("call_%d", n), Name: "lookup_order", Arguments: `{"id":"7"}`}}}
		}
		if m.slow[n] {
			rep.Delay = time.Minute
		}
		return rep
	})
	t.Cleanup(m.Close)
	return m
}

// orderHook writes hooks/orders, the hook tool lookup_order: its program adds a line to
// root/runs each time it runs (a tool with a side effect), waits while root/hold exists
// (a kill comes meanwhile) and answers "order 7: shipped". It returns the two paths.
func orderHook(t *testing.T, root string) (runs, hold string) {
	runs, hold = filepath.Join(root, "runs"), filepath.Join(root, "hold")
	writeHook(t, filepath.Join(root, "hooks"), "orders",
		"tools:\n  - name: lookup_order\n    description: Look up an order\n    parameters: {type: object, properties: {id: {type: string}}, required: [id]}\ncommand: [./run.sh]\ntimeout: 2m\n",
		fmt.Sprintf("cat >/dev/null\necho ran >> %q\nwhile [ -f %q ]; do sleep 0.1; done\necho '{\"content\":\"order 7: shipped\"}'\n", runs, hold))
	return runs, hold
}

// toolResult is the content of the result r carries for the tool call id, and whether it
// carries one.
func toolResult(r openaitest.Request, id string) (string, bool) {
	for _, m := range r.Messages {
		if m.Role == "tool" && m.ToolCallID == id {
			return m.Content, true
		}
	}
	return "", false
}

// checkToolRanOnce fails the test unless the tool's program ran exactly once.
func checkToolRanOnce(t *testing.T, runs string) {
	t.Helper()
	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "ran"); n != 1 {
		t.Errorf("the tool ran %d times; want once: a tool with side effects must not run again because of a restart", n)
	}
}

// A SIGKILL while a hook's tool runs: after the restart the tool is not run again (it may
// have done what it does: sent the mail, opened the ticket). The model is told the call was
// interrupted and its outcome is unknown, and goes on from there; the chat shows one
// answer, in place of the cut preview.
func TestKilledDuringAToolCallDoesNotRunItAgainAfterRestart(t *testing.T) {
	tg := telegramtest.NewServer(t)
	oai := toolModel(t)
	root, addr := t.TempDir(), freePort(t)
	runs, hold := orderHook(t, root)
	writeFile(t, hold, "")
	// An admin's audit hook: it keeps every tool result it is shown, one per line.
	audit := filepath.Join(root, "audit")
	writeHook(t, filepath.Join(root, "hooks"), "audit", "events: [tool_result]\ncommand: [./run.sh]\n", fmt.Sprintf("cat >> %q\necho >> %q\n", audit, audit))
	writeChildConfig(t, root, addr, oai.URL(), fmt.Sprintf("  telegram:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\nhooks:\n  dirs: [./hooks]\n",
		telegramtest.Token, tg.URL, fmt.Sprint(telegramtest.UserID)))
	g := startChild(t, root, addr)
	tg.Send(telegramtest.Update{ChatID: tgChat, Text: "where is my order 7?"})
	waitFor(t, "the tool runs", func() bool { _, err := os.Stat(runs); return err == nil }, g.log)
	waitForPreviewKept(t, g)
	g.kill()
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}

	g = startChild(t, root, addr)
	answersOnceAfterRestart(t, tg, g, "answer 2")
	checkToolRanOnce(t, runs)
	reqs := oai.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model calls = %d; want the tool call before the kill and the answer after it", len(reqs))
	}
	if u := userTurns(reqs[1]); !slices.Equal(u, []string{"where is my order 7?"}) {
		t.Errorf("after the restart the model was asked %q; want the message once", u)
	}
	if res, ok := toolResult(reqs[1], "call_1"); !ok || !strings.Contains(res, "interrupted") || !strings.Contains(res, "unknown") {
		t.Errorf("after the restart the model got %q (%v) for the cut call; want a result saying it was interrupted and its outcome is unknown", res, ok)
	}
	checkAuditedInterrupted(t, audit)
	g.stop()
}

// checkAuditedInterrupted fails the test unless the tool_result hook that wrote the file
// audit was shown the cut call's result, once: an error saying it was interrupted.
func checkAuditedInterrupted(t *testing.T, audit string) {
	t.Helper()
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatalf("the tool_result hook never ran: %v", err)
	}
	var seen []hooks.ToolResult
	for dec := json.NewDecoder(bytes.NewReader(b)); ; {
		var ev hooks.ToolResult
		if err := dec.Decode(&ev); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the tool_result hook was shown %q: %v", b, err)
		}
		seen = append(seen, ev)
	}
	if len(seen) != 1 || seen[0].ToolCallID != "call_1" || !seen[0].IsError || !strings.Contains(seen[0].Content, "interrupted") {
		t.Errorf("the tool_result hook was shown %+v; want the cut call's result once, an error saying it was interrupted", seen)
	}
}

// A SIGKILL after a hook's tool ran and its result was saved, while the model writes the
// answer: after the restart the tool is not run again, and the model is given its saved
// result; the chat shows one answer.
func TestKilledAfterAToolsResultWasSavedUsesItAfterRestart(t *testing.T) {
	tg := telegramtest.NewServer(t)
	oai := toolModel(t, 2)
	root, addr := t.TempDir(), freePort(t)
	runs, _ := orderHook(t, root)
	writeChildConfig(t, root, addr, oai.URL(), fmt.Sprintf("  telegram:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\nhooks:\n  dirs: [./hooks]\n",
		telegramtest.Token, tg.URL, fmt.Sprint(telegramtest.UserID)))
	g := startChild(t, root, addr)
	tg.Send(telegramtest.Update{ChatID: tgChat, Text: "where is my order 7?"})
	// The result is saved before the model is asked with it.
	waitFor(t, "the model is asked with the tool's result", func() bool { return oai.calls() == 2 }, g.log)
	waitForPreviewKept(t, g)
	g.kill()

	g = startChild(t, root, addr)
	answersOnceAfterRestart(t, tg, g, "answer 3")
	checkToolRanOnce(t, runs)
	reqs := oai.Requests()
	if len(reqs) != 3 {
		t.Fatalf("model calls = %d; want the two before the kill and the answer after it", len(reqs))
	}
	if u := userTurns(reqs[2]); !slices.Equal(u, []string{"where is my order 7?"}) {
		t.Errorf("after the restart the model was asked %q; want the message once", u)
	}
	if res, ok := toolResult(reqs[2], "call_1"); !ok || res != "order 7: shipped" {
		t.Errorf("after the restart the model got %q (%v) for the call; want the tool's saved result", res, ok)
	}
	g.stop()
}

// Two SIGKILLs in a row while the answer streams, a second message waiting behind it: after
// the last restart each message is answered once, the first in place of its cut preview.
func TestKilledTwiceMidStreamAnswersEachMessageOnce(t *testing.T) {
	p := telegramPlatform(t)
	oai := &slowModel{Server: openaitest.NewServer()}
	oai.SetFunc(func(openaitest.Request) openaitest.Reply {
		n := oai.n.Add(1)
		if n > 2 {
			return openaitest.Reply{Text: fmt.Sprintf("answer %d", n)}
		}
		return openaitest.Reply{Chunks: []string{fmt.Sprintf("The cut preview %d", n)}, Hang: true}
	})
	t.Cleanup(oai.Close)
	root, addr := newRoot(t, oai, p)
	g := startChild(t, root, addr)
	p.send("first question")
	waitFor(t, "its place is kept", func() bool { return strings.Contains(g.log.String(), "answer placement kept") }, g.log)
	p.send("second question")
	waitFor(t, "the second message is acknowledged", p.acked, g.log)
	g.kill()

	g = startChild(t, root, addr)
	// The second attempt streams into the first one's preview (its place was kept then).
	waitFor(t, "the second preview shows", func() bool { return slices.Equal(p.answer(), []string{"The cut preview 2"}) }, g.log)
	g.kill()

	g = startChild(t, root, addr)
	waitFor(t, "both answered", func() bool { return len(p.answer()) == 2 && oai.calls() == 4 }, g.log)
	quiet()
	if got := p.answer(); !slices.Equal(got, []string{"answer 3", "answer 4"}) {
		t.Fatalf("the chat shows %q; want each message answered once, the first in place of its preview; log:\n%s", got, g.log)
	}
	if u := userTurns(oai.Requests()[3]); !slices.Equal(u, []string{"first question", "second question"}) {
		t.Fatalf("the second message was asked with %q; want each message once", u)
	}
	g.stop()
}

// A turn the admin API started (inject with trigger) is journaled like a user's message: a
// SIGKILL while its answer streams leaves a cut preview, and after the restart the turn is
// run again, its full answer in place of the preview, the injected text asked once.
func TestKillMidStreamOfAnInjectedTurnFinishesItAfterRestart(t *testing.T) {
	p := telegramPlatform(t)
	oai := cutModel(t)
	root, addr := newRoot(t, oai, p)
	g := startChild(t, root, addr)
	body := fmt.Sprintf(`{"channel":"telegram","chat_id":"%d","text":"remind me to water the plants","trigger":true}`, tgChat)
	resp, err := http.Post("http://"+addr+"/api/v1/inject", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("inject: %d; log:\n%s", resp.StatusCode, g.log)
	}
	g = killAtPreviewAndRestart(t, p, g)
	asked := 0
	for _, m := range oai.Requests()[1].Messages {
		if m.Role == "user" && strings.Contains(m.Content, "water the plants") {
			asked++
		}
	}
	if asked != 1 || oai.calls() != 2 {
		t.Fatalf("after the restart the model was called %d times in all, the injected text in its request %d times; want 2 and 1", oai.calls(), asked)
	}
	g.stop()
	g = startChild(t, root, addr) // answered: not run a third time
	quiet()
	if oai.calls() != 2 {
		t.Fatalf("the injected turn ran again after a clean restart: %d model calls", oai.calls())
	}
	g.stop()
}

// waitForPreviewKept waits until the place of the answer's preview ("Let me look.") is
// kept: a kill between the preview's send and that record leaves it in the chat beside the
// answer after the restart, a window no gateway can close (the message's id is known only
// once it is sent), which a busy machine widens.
func waitForPreviewKept(t *testing.T, g *child) {
	t.Helper()
	waitFor(t, "the preview's place is kept", func() bool { return strings.Contains(g.log.String(), "answer placement kept") }, g.log)
}

// answersOnceAfterRestart waits for the restarted gateway g's answer in the Telegram chat,
// then, after a quiet spell, checks the chat shows it alone: want, once.
func answersOnceAfterRestart(t *testing.T, tg *telegramtest.Server, g *child, want string) {
	t.Helper()
	waitFor(t, "answered after the restart", func() bool {
		return slices.ContainsFunc(tg.Messages(tgChat), func(m telegramtest.Message) bool { return strings.HasPrefix(m.Text, "answer") })
	}, g.log)
	quiet()
	var got []string
	for _, m := range tg.Messages(tgChat) {
		got = append(got, m.Text)
	}
	if !slices.Equal(got, []string{want}) {
		t.Fatalf("after the restart the chat shows %q; want %q once; log:\n%s", got, want, g.log)
	}
}
