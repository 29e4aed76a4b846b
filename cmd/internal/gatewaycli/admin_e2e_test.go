package gatewaycli

// End-to-end tests of profiles, hook directories and reload (issue 7): the gateway runs
// in-process through run(...) with a real config file, the real OpenAI provider talks to the
// fake OpenAI server (harness/openaitest), and the tests are users of the web chat over a
// real WebSocket, admins of the CLI and of the loopback admin endpoint.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"gateway/channels/channeltest"
	"gateway/channels/telegram/telegramtest"
	"gateway/harness/openaitest"
	"gateway/internal/fakeserver"
	"gateway/profiles"
)

// logBuffer is the gateway's log sink: written by the gateway, read by the test.
type logBuffer struct{ channeltest.LogBuffer }

// entries returns the JSON log records whose msg is msg.
func (s *logBuffer) entries(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.String()))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// liveGateway is a gateway running in-process from a config file in root.
type liveGateway struct {
	t       *testing.T
	root    string
	cfgPath string
	addr    string
	oai     *openaitest.Server
	reload  chan struct{} // what SIGHUP feeds in main
	log     *logBuffer
}

// gatewayConfig writes root/gateway.yaml: the web chat on a free loopback port, JSON logs,
// the openai provider pointed at oaiURL, hooks.dirs [root/hooks], profiles.dir root/profiles,
// then extra (more top-level keys, e.g. bindings).
func gatewayConfig(t *testing.T, root, addr, oaiURL, extra string) string {
	t.Helper()
	return gatewayConfigRetrying(t, root, addr, oaiURL, extra, 1)
}

// gatewayConfigRetrying is gatewayConfig with llm.max_retries set to retries.
func gatewayConfigRetrying(t *testing.T, root, addr, oaiURL, extra string, retries int) string {
	t.Helper()
	yaml := fmt.Sprintf(`state_dir: %[1]s/data
http:
  listen: %[2]s
log:
  level: info
  format: json
llm:
  provider: openai
  model: test-model
  base_url: %[3]s
  max_retries: %[4]d
hooks:
  dirs: [%[1]s/hooks]
  timeout: 5s
profiles:
  dir: %[1]s/profiles
`, root, addr, oaiURL, retries) + extra
	path := filepath.Join(root, "gateway.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startGateway runs `gateway run --config root/gateway.yaml` until the test ends and waits
// until it is ready. Lay out root/hooks and root/profiles before calling it.
func startGateway(t *testing.T, root, extra string) *liveGateway {
	t.Helper()
	return startGatewayRetrying(t, root, extra, 1)
}

// startGatewayRetrying is startGateway with llm.max_retries set to retries.
func startGatewayRetrying(t *testing.T, root, extra string, retries int) *liveGateway {
	t.Helper()
	return launchGateway(t, root, extra, retries, func(code int, _ string) bool { return code == http.StatusOK })
}

// launchGateway is startGatewayRetrying waiting until up accepts what /readyz answers.
func launchGateway(t *testing.T, root, extra string, retries int, up func(code int, body string) bool) *liveGateway {
	t.Helper()
	return launchGatewayEdited(t, root, extra, retries, up, nil)
}

// launchGatewayEdited is launchGateway with the config file's text passed through edit
// (nil: as written) before the gateway reads it.
func launchGatewayEdited(t *testing.T, root, extra string, retries int, up func(code int, body string) bool, edit func(string) string) *liveGateway {
	t.Helper()
	oai := openaitest.NewServer()
	t.Cleanup(oai.Close) // runs last: the gateway stops first
	g := &liveGateway{t: t, root: root, addr: freePort(t), oai: oai, reload: make(chan struct{}, 1), log: &logBuffer{}}
	g.cfgPath = gatewayConfigRetrying(t, root, g.addr, oai.URL(), extra, retries)
	if edit != nil {
		data, err := os.ReadFile(g.cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, g.cfgPath, edit(string(data)))
	}

	exited := g.runInBackground()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if code, body := g.get("/readyz"); up(code, body) {
			return g
		}
		select {
		case code := <-exited:
			t.Fatalf("gateway exited with status %d before it was ready; log:\n%s", code, g.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not ready within 15s; log:\n%s", g.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runInBackground runs `gateway run --config g.cfgPath` until the test ends and gives its
// exit status on the channel it returns; one other than 0 at the end fails the test.
func (g *liveGateway) runInBackground() <-chan int {
	t := g.t
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, g.reload, []string{"run", "--config", g.cfgPath}, io.Discard, g.log, func(string) string { return "" }, nil)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-exited:
			if code != 0 {
				t.Errorf("gateway exited with status %d; log:\n%s", code, g.log)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("gateway did not shut down within 30s")
		}
	})
	return exited
}

func (g *liveGateway) get(path string) (int, string) {
	resp, err := http.Get("http://" + g.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// postReload is POST /admin/reload; edit may change the request (Host, Origin).
func (g *liveGateway) postReload(edit func(*http.Request)) (int, map[string]any) {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+g.addr+"/admin/reload", nil)
	if err != nil {
		g.t.Fatal(err)
	}
	if edit != nil {
		edit(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// signalReload is what SIGHUP does in main.
func (g *liveGateway) signalReload() { g.reload <- struct{}{} }

// waitLog waits until the log holds at least n records with message msg.
func (g *liveGateway) waitLog(msg string, n int) []map[string]any {
	g.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if recs := g.log.entries(msg); len(recs) >= n {
			return recs
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("no %d log records %q within 15s; log:\n%s", n, msg, g.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lastRequest is the last request the fake provider received.
func (g *liveGateway) lastRequest() openaitest.Request {
	g.t.Helper()
	reqs := g.oai.Requests()
	if len(reqs) == 0 {
		g.t.Fatal("the provider was never called")
	}
	return reqs[len(reqs)-1]
}

// lastUser is what the model was asked: the last user message of r.
func lastUser(r openaitest.Request) string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

// systemOf is the system prompt of r.
func systemOf(r openaitest.Request) string {
	for _, m := range r.Messages {
		if m.Role == "system" {
			return m.Content
		}
	}
	return ""
}

// hookErrors reads gateway_hook_errors_total for source and event from /metrics (0 when absent).
func (g *liveGateway) hookErrors(source, event string) float64 {
	g.t.Helper()
	code, body := g.get("/metrics")
	if code != http.StatusOK {
		g.t.Fatalf("/metrics = %d", code)
	}
	re := regexp.MustCompile(`(?m)^gateway_hook_errors_total\{event="` + regexp.QuoteMeta(event) + `",source="` + regexp.QuoteMeta(source) + `"\} (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		g.t.Fatal(err)
	}
	return v
}

// frame is a frame of the web chat's wire protocol (channels/web/doc.go).
type frame struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	ReplyTo string `json:"reply_to"`
	Parts   []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"parts"`
	Tool *struct {
		Name    string `json:"name"`
		Summary string `json:"summary"`
	} `json:"tool"`
}

// chatUser is a person in the web chat: one real WebSocket bound to one chat id.
type chatUser struct {
	t      *testing.T
	c      *websocket.Conn
	chat   string
	frames chan frame
	n      int
}

func (g *liveGateway) user(chat string) *chatUser {
	t := g.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+g.addr+"/ws?chat_id="+chat, nil)
	if err != nil {
		t.Fatal(err)
	}
	u := &chatUser{t: t, c: c, chat: chat, frames: make(chan frame, 256)}
	readCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(u.frames)
		for {
			_, data, err := c.Read(readCtx)
			if err != nil {
				return
			}
			var f frame
			if json.Unmarshal(data, &f) == nil && f.Type != "ack" {
				select {
				case u.frames <- f:
				case <-readCtx.Done():
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		stop()
		c.Close(websocket.StatusNormalClosure, "")
		<-done
	})
	if f := u.next(); f.Type != "hello" {
		t.Fatalf("first frame %q; want hello", f.Type)
	}
	return u
}

func (u *chatUser) say(text string) {
	u.t.Helper()
	u.n++
	b, _ := json.Marshal(map[string]any{"type": "message", "id": fmt.Sprintf("%s-%d", u.chat, u.n), "chat_id": u.chat, "text": text})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := u.c.Write(ctx, websocket.MessageText, b); err != nil {
		u.t.Fatal(err)
	}
}

func (u *chatUser) next() frame {
	u.t.Helper()
	select {
	case f, ok := <-u.frames:
		if !ok {
			u.t.Fatal("the socket closed")
		}
		return f
	case <-time.After(30 * time.Second):
		u.t.Fatal("no frame within 30s")
	}
	return frame{}
}

// answer reads the frames of one answer, up to and including done or error.
func (u *chatUser) answer() []frame {
	u.t.Helper()
	var out []frame
	for {
		f := u.next()
		out = append(out, f)
		if f.Type == "done" || f.Type == "error" {
			return out
		}
	}
}

// ask says text and returns the answer's frames.
func (u *chatUser) ask(text string) []frame {
	u.t.Helper()
	u.say(text)
	return u.answer()
}

// partTexts lists the text parts of the answer's parts frames, in order.
func partTexts(fs []frame) []string {
	var out []string
	for _, f := range fs {
		for _, p := range f.Parts {
			if f.Type == "parts" && p.Type == "text" {
				out = append(out, p.Text)
			}
		}
	}
	return out
}

func frameTypes(fs []frame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Type
	}
	return out
}

// writeHook lays out dir/name/HOOK.yaml and, when script is not empty, an executable
// dir/name/run.sh running script under /bin/sh.
func writeHook(t *testing.T, dir, name, hookYAML, script string) string {
	t.Helper()
	folder := filepath.Join(dir, name)
	if err := os.MkdirAll(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(folder, "HOOK.yaml"), []byte(hookYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	if script != "" {
		if err := os.WriteFile(filepath.Join(folder, "run.sh"), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return folder
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Hook programs. Each reads the event's JSON on stdin (message text never reaches argv).
const (
	receiveYAML = "events: [message:receive]\ncommand: [./run.sh]\n"
	sendYAML    = "events: [message:send]\ncommand: [./run.sh]\n"

	// rejectBananas refuses any message that mentions bananas, with a reason for the user.
	rejectBananas = `input=$(cat)
case "$input" in
*banana*) echo '{"action":"reject","reason":"Bananas are not allowed in this chat."}' ;;
esac
`
	// shout hands the message on in capitals. (Good enough for the plain ASCII of the tests.)
	shout = `text=$(sed -n 's/.*"text":"\([^"]*\)".*/\1/p' | head -n 1)
printf '{"action":"transform","text":"%s"}\n' "$(printf '%s' "$text" | tr 'a-z' 'A-Z')"
`
)

// prefixWith is a transform hook that puts tag before the message text.
func prefixWith(tag string) string {
	return `text=$(sed -n 's/.*"text":"\([^"]*\)".*/\1/p' | head -n 1)
printf '{"action":"transform","text":"` + tag + ` %s"}\n' "$text"
`
}

// footer is a message:send hook that adds a text part to every answer.
func footer(text string) string {
	return "cat >/dev/null\necho '{\"parts\":[{\"type\":\"text\",\"text\":\"" + text + "\"}]}'\n"
}

// TestHookDirectoryShapesMessages: hooks.dirs programs reject, transform and append, and
// hooks that time out, fail or print garbage cost the user nothing but are logged by name
// and counted in /metrics. A broken HOOK.yaml does not stop the gateway from starting.
func TestHookDirectoryShapesMessages(t *testing.T) {
	root := t.TempDir()
	hooksDir := filepath.Join(root, "hooks")
	writeHook(t, hooksDir, "10-no-bananas", receiveYAML, rejectBananas)
	writeHook(t, hooksDir, "20-shout", receiveYAML, shout)
	writeHook(t, hooksDir, "30-footer", sendYAML, footer("(checked by the footer hook)"))
	writeHook(t, hooksDir, "40-slow", receiveYAML+"timeout: 300ms\n", "cat >/dev/null\nsleep 20\n")
	writeHook(t, hooksDir, "50-fails", receiveYAML, "cat >/dev/null\necho 'database unreachable' >&2\nexit 1\n")
	writeHook(t, hooksDir, "60-garbage", receiveYAML, "cat >/dev/null\necho 'this is not JSON {'\n")
	writeHook(t, hooksDir, "70-broken", "events: [message:recieve]\ncommand: [./run.sh]\n", "cat >/dev/null\n")

	g := startGateway(t, root, "")
	g.oai.Push(openaitest.Reply{Chunks: []string{"Hello ", "to you."}})
	u := g.user("chat-1")

	// Rejected: the user reads the hook's reason; no turn starts.
	got := u.ask("Any recipes for banana bread?")
	if len(got) != 1 || got[0].Type != "done" || got[0].Text != "Bananas are not allowed in this chat." {
		t.Fatalf("rejected message answered with %+v; want one done frame with the hook's reason", got)
	}

	// Transformed, answered despite three failing hooks, and the send hook's part lands before done.
	got = u.ask("hello there")
	if last := got[len(got)-1]; last.Type != "done" || last.Text != "Hello to you." {
		t.Fatalf("answer frames %v, last %+v; want the model's answer in done", frameTypes(got), last)
	}
	if parts := partTexts(got); len(parts) != 1 || parts[0] != "(checked by the footer hook)" {
		t.Fatalf("parts before done = %q (frames %v); want the footer hook's text", parts, frameTypes(got))
	}
	if types := frameTypes(got); types[len(types)-2] != "parts" {
		t.Fatalf("frames %v: the hook's parts must come right before done", types)
	}
	reqs := g.oai.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the provider got %d requests; want 1 (the rejected message must never reach it)", len(reqs))
	}
	if text := lastUser(reqs[0]); text != "HELLO THERE" {
		t.Fatalf("the provider was asked %q; want the transformed text %q", text, "HELLO THERE")
	}
	for _, r := range reqs[0].Messages {
		if strings.Contains(r.Content, "banana") {
			t.Fatalf("the rejected message reached the model's context: %+v", reqs[0].Messages)
		}
	}

	// Each failure is logged with the hook's source and counted once (the rejected message
	// stopped the chain before them, so only the answered one counts).
	failures := map[string]*regexp.Regexp{ // the reason each failure is logged with
		"40-slow":    regexp.MustCompile(`timed out|stopped`),
		"50-fails":   regexp.MustCompile(`exited with code 1.*database unreachable`),
		"60-garbage": regexp.MustCompile(`60-garbage`),
	}
	recs := g.waitLog("hook failed; continuing without it", len(failures))
	for name, want := range failures {
		source := "dir:" + hooksDir + "/" + name
		found := false
		for _, r := range recs {
			if r["source"] == source && r["event"] == "message:receive" && want.MatchString(fmt.Sprint(r["err"])) {
				found = true
			}
		}
		if !found {
			t.Errorf("no log record naming %s with %q; records: %v", source, want, recs)
		}
		if n := g.hookErrors(source, "message:receive"); n != 1 {
			t.Errorf("gateway_hook_errors_total{source=%q} = %v; want 1", source, n)
		}
	}
	// The broken hook was reported at startup, with its reason, and skipped.
	broken := g.log.entries("hook not loaded")
	if len(broken) == 0 || !strings.Contains(fmt.Sprint(broken[0]["path"]), "70-broken") || !strings.Contains(fmt.Sprint(broken[0]["err"]), `unknown event "message:recieve"`) {
		t.Errorf("startup log for the broken hook: %v", broken)
	}
}

// TestProfilesAnswerWithTheirOwnPromptAndHooks: two chats bound to two profiles get their
// profile's system prompt and only their profile's hooks; a third chat gets the default.
func TestProfilesAnswerWithTheirOwnPromptAndHooks(t *testing.T) {
	root := t.TempDir()
	prof := filepath.Join(root, "profiles")
	writeFile(t, filepath.Join(prof, "alpha", "SYSTEM.md"), "You are Alpha, the support desk.\n")
	writeHook(t, filepath.Join(prof, "alpha", "hooks"), "tag", receiveYAML, prefixWith("[alpha-hook]"))
	writeHook(t, filepath.Join(prof, "alpha", "hooks"), "sign", sendYAML, footer("-- Alpha"))
	writeFile(t, filepath.Join(prof, "beta", "SYSTEM.md"), "You are Beta, the sales desk.\n")
	writeHook(t, filepath.Join(prof, "beta", "hooks"), "tag", receiveYAML, prefixWith("[beta-hook]"))
	g := startGateway(t, root, `bindings:
  - profile: alpha
    match: {channel: web, chat: chat-a}
  - profile: beta
    match: {channel: web, chat: chat-b}
`)
	cases := []struct {
		chat, system, asked string
		parts               []string
	}{
		{"chat-a", "You are Alpha, the support desk.", "[alpha-hook] hello", []string{"-- Alpha"}},
		{"chat-b", "You are Beta, the sales desk.", "[beta-hook] hello", nil},
		{"chat-c", profiles.DefaultSystemPrompt, "hello", nil},
	}
	for _, c := range cases {
		got := g.user(c.chat).ask("hello")
		if last := got[len(got)-1]; last.Type != "done" {
			t.Fatalf("%s: answer frames %v, last %+v", c.chat, frameTypes(got), last)
		}
		r := g.lastRequest()
		if sys := systemOf(r); sys != c.system {
			t.Errorf("%s: the model's system prompt was %q; want %q", c.chat, sys, c.system)
		}
		if text := lastUser(r); text != c.asked {
			t.Errorf("%s: the model was asked %q; want %q (only the bound profile's hooks may touch it)", c.chat, text, c.asked)
		}
		if parts := partTexts(got); strings.Join(parts, "|") != strings.Join(c.parts, "|") {
			t.Errorf("%s: parts %q; want %q", c.chat, parts, c.parts)
		}
	}
}

// TestReloadSwapsHooksButNotTheTurnInFlight: after a reload (the SIGHUP path) the next
// message sees the new hook folders, while the turn running during the reload finishes
// with the hooks it started with, even one the reload disabled.
func TestReloadSwapsHooksButNotTheTurnInFlight(t *testing.T) {
	root := t.TempDir()
	hooksDir := filepath.Join(root, "hooks")
	writeHook(t, hooksDir, "footer", sendYAML, footer("(footer v1)"))
	g := startGateway(t, root, "")

	// The first request waits in the fake provider until the reload is done.
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	g.oai.SetFunc(func(openaitest.Request) openaitest.Reply {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
		return openaitest.Reply{Text: "answer"}
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	u := g.user("chat-r")
	u.say("first question")
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatalf("the first turn never reached the provider; log:\n%s", g.log)
	}

	// Mid-turn: the admin disables the old footer and adds a new footer and a transform.
	writeHook(t, hooksDir, "footer", sendYAML+"enabled: false\n", "") // run.sh stays: the old set still runs it
	writeHook(t, hooksDir, "footer2", sendYAML, footer("(footer v2)"))
	writeHook(t, hooksDir, "shout", receiveYAML, shout)
	g.signalReload()
	g.waitLog("reloaded profiles and hooks", 1)
	close(release)

	got := u.answer()
	if last := got[len(got)-1]; last.Type != "done" || last.Text != "answer" {
		t.Fatalf("turn in flight: frames %v, last %+v", frameTypes(got), last)
	}
	if parts := partTexts(got); len(parts) != 1 || parts[0] != "(footer v1)" {
		t.Fatalf("the turn in flight got parts %q; want the hooks it started with: [(footer v1)]", parts)
	}

	got = u.ask("second question")
	if parts := partTexts(got); len(parts) != 1 || parts[0] != "(footer v2)" {
		t.Fatalf("the turn after the reload got parts %q; want [(footer v2)]", parts)
	}
	if text := lastUser(g.lastRequest()); text != "SECOND QUESTION" {
		t.Fatalf("after the reload the model was asked %q; want the new hook's transform", text)
	}
}

// TestReloadWithABrokenHookKeepsTheOldSet: a reload that finds a broken HOOK.yaml fails as a
// whole, says why (HTTP, SIGHUP log, CLI), and the running hooks stay as they were; once
// fixed, `gateway reload` applies the change.
func TestReloadWithABrokenHookKeepsTheOldSet(t *testing.T) {
	root := t.TempDir()
	hooksDir := filepath.Join(root, "hooks")
	writeHook(t, hooksDir, "shout", receiveYAML, shout)
	g := startGateway(t, root, "")
	u := g.user("chat-k")
	u.ask("one")
	if text := lastUser(g.lastRequest()); text != "ONE" {
		t.Fatalf("asked %q; want ONE", text)
	}

	// Disabling shout would show; the broken folder must stop the whole change.
	writeHook(t, hooksDir, "shout", receiveYAML+"enabled: false\n", "")
	brokenDir := writeHook(t, hooksDir, "typo", "events: [message:recieve]\ncommand: [./run.sh]\n", "cat >/dev/null\n")

	code, body := g.postReload(nil)
	if code != http.StatusUnprocessableEntity || !strings.Contains(fmt.Sprint(body["error"]), brokenDir) ||
		!strings.Contains(fmt.Sprint(body["error"]), `unknown event "message:recieve"`) {
		t.Fatalf("POST /admin/reload = %d %v; want 422 naming %s and the unknown event", code, body, brokenDir)
	}
	g.signalReload()
	recs := g.waitLog("reload failed; keeping the previous profiles and hooks", 2)
	if !strings.Contains(fmt.Sprint(recs[1]["err"]), brokenDir) {
		t.Fatalf("the SIGHUP reload's log does not name the broken hook: %v", recs[1])
	}
	code, out := cli(t, context.Background(), nil, "reload", "--config", g.cfgPath)
	if code != 1 || !strings.Contains(out, brokenDir) {
		t.Fatalf("`gateway reload` = %d:\n%s\nwant exit 1 naming the broken hook", code, out)
	}
	if n := len(g.log.entries("reloaded profiles and hooks")); n != 0 {
		t.Fatalf("%d reloads were applied; want none", n)
	}

	u.ask("two")
	if text := lastUser(g.lastRequest()); text != "TWO" {
		t.Fatalf("after the failed reloads the model was asked %q; want TWO (the old hooks still run)", text)
	}

	// `gateway hooks list` shows the admin what is wrong on disk.
	code, out = cli(t, context.Background(), nil, "hooks", "list", "--config", g.cfgPath)
	if code != 1 || !strings.Contains(out, "not loaded:") || !strings.Contains(out, brokenDir+": HOOK.yaml:1: events[0]: unknown event") {
		t.Fatalf("`gateway hooks list` = %d:\n%s", code, out)
	}

	// Fixed: `gateway reload` against the running gateway applies the change.
	if err := os.RemoveAll(brokenDir); err != nil {
		t.Fatal(err)
	}
	code, out = cli(t, context.Background(), nil, "reload", "--config", g.cfgPath)
	if code != 0 || !strings.Contains(out, "reloaded") {
		t.Fatalf("`gateway reload` = %d:\n%s", code, out)
	}
	u.ask("three")
	if text := lastUser(g.lastRequest()); text != "three" {
		t.Fatalf("after the reload the model was asked %q; want three (shout disabled)", text)
	}
}

// TestReloadUnderLoadLosesNothing: reloads arriving while several chats are mid-turn lose
// no message and never leave a turn without its hooks (a runtime closed under a running
// turn would drop the footer).
func TestReloadUnderLoadLosesNothing(t *testing.T) {
	root := t.TempDir()
	writeHook(t, filepath.Join(root, "hooks"), "footer", sendYAML, footer("(footer)"))
	g := startGateway(t, root, "")
	g.oai.SetFunc(func(r openaitest.Request) openaitest.Reply {
		return openaitest.Reply{Chunks: []string{"re: ", lastUser(r)}, ChunkDelay: 5 * time.Millisecond}
	})

	stop := make(chan struct{})
	reloads := make(chan error, 1) // the reloader's one result
	go func() {
		reloads <- func() error {
			for n := 0; ; n++ {
				select {
				case <-stop:
					if n == 0 {
						return errors.New("no reload ran")
					}
					return nil
				default:
				}
				resp, err := http.Post("http://"+g.addr+"/admin/reload", "", nil)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("reload %d: status %d", n, resp.StatusCode)
				}
			}
		}()
	}()
	t.Cleanup(func() { // a failed assertion still stops the reloader
		select {
		case <-stop:
		default:
			close(stop)
			<-reloads
		}
	})

	users := make([]*chatUser, 4)
	for i := range users {
		users[i] = g.user(fmt.Sprintf("load-%d", i))
	}
	for round := range 8 {
		for i, u := range users { // every chat is mid-turn at once
			u.say(fmt.Sprintf("m%d-%d", i, round))
		}
		for i, u := range users {
			got := u.answer()
			want := fmt.Sprintf("re: m%d-%d", i, round)
			if last := got[len(got)-1]; last.Type != "done" || last.Text != want {
				t.Fatalf("chat %d round %d: frames %v, last %+v; want done %q", i, round, frameTypes(got), last, want)
			}
			if parts := partTexts(got); len(parts) != 1 || parts[0] != "(footer)" {
				t.Fatalf("chat %d round %d: parts %q; want the footer once", i, round, parts)
			}
		}
	}
	close(stop)
	if err := <-reloads; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d reloads during %d answers", len(g.log.entries("reloaded profiles and hooks")), 8*len(users))
}

// TestAdminReloadIsLoopbackOnly: POST /admin/reload works from loopback and refuses a
// request whose Host or Origin says it came through a browser elsewhere (DNS rebinding).
func TestAdminReloadIsLoopbackOnly(t *testing.T) {
	root := t.TempDir()
	g := startGateway(t, root, "")
	for _, c := range []struct {
		name string
		edit func(*http.Request)
	}{
		{"foreign Host", func(r *http.Request) { r.Host = "attacker.example:80" }},
		{"rebinding Host with loopback address", func(r *http.Request) { r.Host = "gateway.attacker.example" }},
		{"cross-site Origin", func(r *http.Request) { r.Header.Set("Origin", "http://attacker.example") }},
	} {
		if code, body := g.postReload(c.edit); code != http.StatusForbidden {
			t.Errorf("%s: POST /admin/reload = %d %v; want 403", c.name, code, body)
		}
	}
	// The refusal of a foreign Host says what is answered, not "cross-site".
	if _, body := g.postReload(func(r *http.Request) { r.Host = "myhost:8080" }); !strings.Contains(fmt.Sprint(body["error"]), `answers only requests addressed to 127.0.0.1, [::1] or localhost, not to "myhost"`) {
		t.Errorf("POST /admin/reload to Host myhost: %v; want the hosts it answers named", body)
	}
	if n := len(g.log.entries("reloaded profiles and hooks")); n != 0 {
		t.Fatalf("a refused request reloaded the gateway")
	}
	if code, body := g.postReload(nil); code != http.StatusOK || body["status"] != "reloaded" {
		t.Fatalf("POST /admin/reload from loopback = %d %v", code, body)
	}
	g.waitLog("reloaded profiles and hooks", 1)
	if code, _ := g.get("/admin/reload"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /admin/reload = %d; want 405", code)
	}
}

// TestAdminCommandsListHooksProfilesAndProblems: `gateway hooks list`, `profiles list` and
// `check` show an admin what loaded, from where, and what is broken and why.
func TestAdminCommandsListHooksProfilesAndProblems(t *testing.T) {
	root := t.TempDir()
	hooksDir := filepath.Join(root, "hooks")
	prof := filepath.Join(root, "profiles")
	writeHook(t, hooksDir, "10-audit", "events: [message:receive, message:send]\ncommand: [./run.sh]\n", "cat >/dev/null\n")
	writeHook(t, hooksDir, "20-observer", "events: [\"*\"]\nurl: http://127.0.0.1:9/hook\n", "")
	writeHook(t, hooksDir, "30-off", receiveYAML+"enabled: false\n", "cat >/dev/null\n")
	writeHook(t, hooksDir, "40-typo", "events: [message:recieve]\ncommand: [./run.sh]\n", "cat >/dev/null\n")
	writeHook(t, hooksDir, "50-missing-program", "events: [message:send]\ncommand: [./nothing-here.sh]\n", "")
	writeFile(t, filepath.Join(prof, "alpha", "profile.yaml"), "description: The support desk\n")
	writeHook(t, filepath.Join(prof, "alpha", "hooks"), "tag", receiveYAML, "cat >/dev/null\n")
	writeFile(t, filepath.Join(prof, "beta", "SYSTEM.md"), "You are Beta.\n")
	path := gatewayConfig(t, root, "127.0.0.1:1", "http://127.0.0.1:1/v1", `bindings:
  - profile: alpha
    match: {channel: web, chat: chat-a}
  - profile: alpha
    match: {channel: telegram, chat: "-100123"}
  - profile: beta
    match: {channel: web, user: u-7}
`)
	ctx := context.Background()

	code, out := cli(t, ctx, nil, "hooks", "list", "--config", path)
	if code != 1 { // 40-typo and 50-missing-program did not load
		t.Fatalf("hooks list exit %d; want 1:\n%s", code, out)
	}
	for _, want := range [][]string{
		{"dir:" + hooksDir + "/10-audit", "message:receive"},
		{"dir:" + hooksDir + "/10-audit", "message:send"},
		{"dir:" + hooksDir + "/20-observer", "*"},
		{"profile:alpha:hooks/tag", "message:receive", "alpha"},
		{"dir:" + hooksDir + "/30-off", "message:receive"},
		{filepath.Join(hooksDir, "40-typo") + ": HOOK.yaml:1: events[0]: unknown event \"message:recieve\""},
		{filepath.Join(hooksDir, "50-missing-program") + ": HOOK.yaml:2: command: program \"./nothing-here.sh\" not found"},
	} {
		if !hasLine(out, want...) {
			t.Errorf("hooks list has no line with %q:\n%s", want, out)
		}
	}
	disabled := out[strings.Index(out, "disabled"):]
	notLoaded := out[strings.Index(out, "not loaded:"):]
	if !strings.Contains(disabled, "30-off") || !strings.Contains(notLoaded, "40-typo") || !strings.Contains(notLoaded, "50-missing-program") {
		t.Errorf("hooks list does not sort hooks into disabled / not loaded:\n%s", out)
	}

	code, out = cli(t, ctx, nil, "profiles", "list", "--config", path)
	if code != 0 {
		t.Fatalf("profiles list exit %d:\n%s", code, out)
	}
	for _, want := range [][]string{
		{"alpha", filepath.Join(prof, "alpha")},
		{"The support desk"},
		{"hooks:", filepath.Join(prof, "alpha", "hooks")},
		{`bound: channel="web" chat="chat-a"`},
		{`bound: channel="telegram" chat="-100123"`},
		{"beta", filepath.Join(prof, "beta")},
		{`bound: channel="web" chat="" thread="" user="u-7"`},
		{"assistant (default)", "built-in"},
	} {
		if !hasLine(out, want...) {
			t.Errorf("profiles list has no line with %q:\n%s", want, out)
		}
	}

	code, out = cli(t, ctx, nil, "check", "--config", path)
	problems := out[strings.Index(out, "problems:")+1:]
	if code != 1 || !strings.Contains(problems, "40-typo") || !strings.Contains(problems, `unknown event "message:recieve"`) ||
		!strings.Contains(problems, "50-missing-program") {
		t.Fatalf("check = %d; want exit 1 naming both broken hooks:\n%s", code, out)
	}
	if strings.Contains(problems, "10-audit") || strings.Contains(problems, "30-off") {
		t.Fatalf("check reports a hook that is fine:\n%s", problems)
	}
}

// hasLine reports whether one line of out contains every string of want.
func hasLine(out string, want ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			return true
		}
	}
	return false
}

// TestReloadCommandReachesAWildcardListener: `gateway reload` must reach a gateway that
// listens on every interface through loopback, the only Host the admin endpoint accepts.
func TestReloadCommandReachesAWildcardListener(t *testing.T) {
	for listen, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080",
		"localhost:8080": "http://localhost:8080",
		":8080":          "http://127.0.0.1:8080",
		"0.0.0.0:8080":   "http://127.0.0.1:8080",
		"[::]:8080":      "http://[::1]:8080",
		"[::1]:8080":     "http://[::1]:8080",
	} {
		if got := adminURL(listen); got != want {
			t.Errorf("adminURL(%q) = %q; want %q", listen, got, want)
		}
	}
}

// llm.max_retries counts the calls made again after a failure: 0 is none, as the example
// config says, not the default of 3; 1 is one more.
func TestMaxRetriesZeroMakesOneCall(t *testing.T) {
	for _, tc := range []struct{ retries, calls int }{{0, 1}, {1, 2}} {
		t.Run(fmt.Sprint(tc.retries), func(t *testing.T) {
			g := startGatewayRetrying(t, t.TempDir(), "", tc.retries)
			for range 4 {
				g.oai.Push(openaitest.Reply{Status: 500, Message: "the model fell over"})
			}
			got := g.user("chat-1").ask("hello")
			if last := got[len(got)-1]; !strings.Contains(last.Text, "HTTP 500") {
				t.Fatalf("answer %+v; want the user told the model failed", last)
			}
			if n := len(g.oai.Requests()); n != tc.calls {
				t.Fatalf("max_retries %d made %d calls, want %d", tc.retries, n, tc.calls)
			}
		})
	}
}

// TestAdminSendKeepsTheStateDir: as `gateway run` wires it, POST /api/v1/send refuses the
// files under state_dir that are not media (here the state database it really opened), and
// `gateway send` prints the gateway's refusal and exits 1.
func TestAdminSendKeepsTheStateDir(t *testing.T) {
	root := t.TempDir()
	g := startGateway(t, root, "")
	db := filepath.Join(root, "data", "state.db")
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("the gateway keeps no state.db where this test expects it: %v", err)
	}
	body := `{"channel": "web", "chat_id": "c1", "parts": [{"type": "file", "path": "` + db + `"}]}`
	resp, err := http.Post("http://"+g.addr+"/api/v1/send", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(out), "state_dir/media") {
		t.Errorf("send state.db: %d %s; want 403 naming the rule", resp.StatusCode, out)
	}

	code, printed := cli(t, context.Background(), nil, "send", "--config", g.cfgPath, "--channel", "nope", "--chat", "1", "hi")
	if code != 1 || !strings.Contains(printed, "no channel") || !strings.Contains(printed, "nope") {
		t.Errorf("gateway send to an unknown channel: exit %d, printed %q", code, printed)
	}
}

// TestSendToAWebChatNoPageCanOpenIsRefused: `gateway send --channel web` to a chat id the
// page cannot have (a space, too long) said "sent" and reached no one.
func TestSendToAWebChatNoPageCanOpenIsRefused(t *testing.T) {
	g := startGateway(t, t.TempDir(), "")
	for _, chat := range []string{"my chat", strings.Repeat("c", 129)} {
		code, printed := cli(t, context.Background(), nil, "send", "--config", g.cfgPath, "--channel", "web", "--chat", chat, "Backup done")
		if code != 1 || !strings.Contains(printed, "HTTP 400") || !strings.Contains(printed, "is not a web chat id") {
			t.Errorf("gateway send to web chat %q: exit %d, printed %q; want a 400 naming the rule", chat, code, printed)
		}
	}
	if code, printed := cli(t, context.Background(), nil, "send", "--config", g.cfgPath, "--channel", "web", "--chat", "c1", "Backup done"); code != 0 || !strings.Contains(printed, "sent") {
		t.Errorf("gateway send to web chat c1: exit %d, printed %q", code, printed)
	}
}

// TestSendToAMalformedTelegramChatIsTheCallersMistake: a chat id Telegram cannot have (not a
// number) was answered 502 "delivery failed", as if Telegram had failed. It is the caller's
// mistake: 400, saying what a chat id looks like, and nothing reaches Telegram. A send that
// Telegram refuses is still 502.
func TestSendToAMalformedTelegramChatIsTheCallersMistake(t *testing.T) {
	tg := telegramtest.NewServer(t)
	channelsYAML := fmt.Sprintf("channels:\n  telegram:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\n",
		telegramtest.Token, tg.URL, fmt.Sprint(telegramtest.UserID))
	g := startGateway(t, t.TempDir(), channelsYAML)
	send := func(args ...string) (int, string) {
		return cli(t, context.Background(), nil, append([]string{"send", "--config", g.cfgPath, "--channel", "telegram"}, args...)...)
	}

	for _, args := range [][]string{{"--chat", "general"}, {"--chat", "4242", "--thread", "news"}} {
		code, printed := send(append(args, "Backup done")...)
		if code != 1 || !strings.Contains(printed, "HTTP 400") || !strings.Contains(printed, "is not a Telegram") || !strings.Contains(printed, "a number") {
			t.Errorf("gateway send %q: exit %d, printed %q; want a 400 saying what an id looks like", args, code, printed)
		}
	}
	if n := len(tg.Calls("sendMessage")); n != 0 {
		t.Errorf("%d sendMessage calls for malformed chats; want none", n)
	}

	tg.AddChat(4242)
	tg.FailNext(1, fakeserver.Failure{Method: "sendMessage", Status: http.StatusForbidden, Message: "Forbidden: bot was blocked by the user"})
	if code, printed := send("--chat", "4242", "Backup done"); code != 1 || !strings.Contains(printed, "HTTP 502") || !strings.Contains(printed, "blocked the bot") {
		t.Errorf("gateway send that Telegram refused: exit %d, printed %q; want 502 saying the user blocked the bot", code, printed)
	}
}

// TestSendCommandWaitsOutARateLimit: `gateway send` to a chat Telegram rate-limits for longer
// than half a minute waits for the gateway's answer: the message is delivered once, after the
// wait Telegram asked for, and the command says "sent". The command used to give up after 30s,
// say it could not reach the gateway, and so cancel the delivery.
func TestSendCommandWaitsOutARateLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 35-second rate limit")
	}
	tg := telegramtest.NewServer(t)
	channelsYAML := fmt.Sprintf("channels:\n  telegram:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\n",
		telegramtest.Token, tg.URL, fmt.Sprint(telegramtest.UserID))
	g := startGateway(t, t.TempDir(), channelsYAML)
	tg.AddChat(4242)
	tg.FailNext(1, fakeserver.Failure{Method: "sendMessage", RetryAfter: 35 * time.Second})

	code, printed := cli(t, context.Background(), nil, "send", "--config", g.cfgPath, "--channel", "telegram", "--chat", "4242", "Backup done")
	if code != 0 || !strings.Contains(printed, "sent") {
		t.Errorf("gateway send: exit %d, printed %q; want the gateway's \"sent\"", code, printed)
	}
	var texts []string
	for _, m := range tg.Messages(4242) {
		texts = append(texts, m.Text)
	}
	if !slices.Equal(texts, []string{"Backup done"}) {
		t.Errorf("the chat shows %q; want the message once", texts)
	}
	if n := len(tg.Calls("sendMessage")); n < 2 {
		t.Errorf("%d sendMessage calls; want the refused one and the retry", n)
	}
}

// TestHooksListShowsWhatRuns: a hook whose command clashes (with another hook's, or with
// a builtin) does not run, so `hooks list` shows it under "not loaded" only, and a
// gateway whose hooks serve only commands does not read "no hooks loaded".
func TestHooksListShowsWhatRuns(t *testing.T) {
	root := t.TempDir()
	hooksDir := filepath.Join(root, "hooks")
	writeHook(t, hooksDir, "10-ping", "commands: [{name: ping, description: answers pong}]\ncommand: [./run.sh]\n", "echo '{\"text\":\"pong\"}'\n")
	writeHook(t, hooksDir, "20-ping-again", "commands: [{name: ping, description: also pong}]\ncommand: [./run.sh]\n", "echo '{\"text\":\"pong\"}'\n")
	writeHook(t, hooksDir, "30-new", "commands: [{name: new, description: my own new}]\ncommand: [./run.sh]\n", "exit 0\n")
	path := gatewayConfig(t, root, "127.0.0.1:1", "http://127.0.0.1:1/v1", "")

	code, out := cli(t, context.Background(), nil, "hooks", "list", "--config", path)
	if code != 1 { // the clashing hooks did not load
		t.Fatalf("hooks list exit %d; want 1:\n%s", code, out)
	}
	if strings.Contains(out, "no hooks loaded") || !strings.HasPrefix(out, "no event handlers: the 1 hook(s) loaded serve only commands or tools") {
		t.Errorf("hooks list's headline is not true: 10-ping loaded and serves a command:\n%s", out)
	}
	i, j := strings.Index(out, "commands and tools:"), strings.Index(out, "not loaded:")
	if i < 0 || j < i {
		t.Fatalf("hooks list has no 'commands and tools:' before 'not loaded:':\n%s", out)
	}
	running, notLoaded := out[i:j], out[j:]
	if !hasLine(running, "dir:"+hooksDir+"/10-ping", "command /ping") {
		t.Errorf("the /ping that runs is not listed:\n%s", out)
	}
	if strings.Contains(running, "20-ping-again") || strings.Contains(running, "30-new") || strings.Contains(running, "/new") {
		t.Errorf("commands that do not run are listed as loaded:\n%s", out)
	}
	if !strings.Contains(notLoaded, "20-ping-again") || !strings.Contains(notLoaded, "30-new") {
		t.Errorf("the clashing hooks are not under 'not loaded':\n%s", out)
	}
}

// A reload applies profiles, bindings and hooks; a change elsewhere in the file (here the
// model) is not applied, and the log says which sections wait for a restart.
func TestReloadNamesWhatWaitsForARestart(t *testing.T) {
	root := t.TempDir()
	g := startGateway(t, root, "")
	const warn = "reload: these sections of the config file changed and apply only after a restart"
	if code, out := cli(t, context.Background(), nil, "reload", "--config", g.cfgPath); code != 0 {
		t.Fatalf("`gateway reload` = %d:\n%s", code, out)
	}
	g.waitLog("reloaded profiles and hooks", 1)
	if n := len(g.log.entries(warn)); n != 0 {
		t.Fatalf("a reload of an unchanged file warned %d times", n)
	}
	data, err := os.ReadFile(g.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.cfgPath, bytes.Replace(data, []byte("model: test-model"), []byte("model: other-model"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := cli(t, context.Background(), nil, "reload", "--config", g.cfgPath)
	if code != 0 {
		t.Fatalf("`gateway reload` = %d:\n%s", code, out)
	}
	recs := g.waitLog(warn, 1)
	if got := fmt.Sprint(recs[0]["sections"]); got != "llm" {
		t.Fatalf("the warning names %q; want llm", got)
	}
	// The admin who ran the command is told too, not only whoever reads the log.
	if want := "apply only after a restart: llm"; !strings.Contains(out, want) {
		t.Fatalf("`gateway reload` printed %q; want it to say %q", out, want)
	}
}

// A reload does not start or stop MCP servers; when it finds that a profile's own servers
// changed (a profile added with mcp:, a server added to one), the log names those profiles,
// rather than leaving the admin to wonder why the new tools never reach the model.
func TestReloadNamesProfilesWhoseMCPWaitsForARestart(t *testing.T) {
	root := t.TempDir()
	writeProfile := func(name, yaml string) {
		t.Helper()
		dir := filepath.Join(root, "profiles", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "profile.yaml"), []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Servers that are down: the gateway starts without their tools, which is enough here.
	writeProfile("support", "mcp:\n  - {name: one, url: \"http://127.0.0.1:1/mcp\"}\n")
	writeProfile("sales", "description: no MCP of its own\n")
	g := startGateway(t, root, "")
	const warn = "reload: the MCP servers of these profiles changed and apply only after a restart"
	if code, out := cli(t, context.Background(), nil, "reload", "--config", g.cfgPath); code != 0 {
		t.Fatalf("`gateway reload` = %d:\n%s", code, out)
	}
	g.waitLog("reloaded profiles and hooks", 1)
	if n := len(g.log.entries(warn)); n != 0 {
		t.Fatalf("a reload of unchanged profiles warned %d times", n)
	}
	writeProfile("support", "mcp:\n  - {name: one, url: \"http://127.0.0.1:1/mcp\"}\n  - {name: two, url: \"http://127.0.0.1:1/other\"}\n")
	writeProfile("extra", "mcp:\n  - {name: three, url: \"http://127.0.0.1:1/mcp\"}\n")
	code, out := cli(t, context.Background(), nil, "reload", "--config", g.cfgPath)
	if code != 0 {
		t.Fatalf("`gateway reload` = %d:\n%s", code, out)
	}
	recs := g.waitLog(warn, 1)
	if got := fmt.Sprint(recs[0]["profiles"]); got != "extra, support" {
		t.Fatalf("the warning names %q; want extra, support", got)
	}
	if want := "apply only after a restart: extra, support"; !strings.Contains(out, want) {
		t.Fatalf("`gateway reload` printed %q; want it to say %q", out, want)
	}
}

// TestStatusAfterAReloadShowsTheNewModel: an admin who gives a profile another model and
// reloads checks with /status in an idle chat that already talked. It showed the model and
// context window from before the reload (while the queue mode beside them was the new
// one), as if the reload had done nothing, until the chat's next message.
func TestStatusAfterAReloadShowsTheNewModel(t *testing.T) {
	root := t.TempDir()
	prof := filepath.Join(root, "profiles")
	writeFile(t, filepath.Join(prof, "alpha", "profile.yaml"), "queue_mode: followup\n")
	g := startGateway(t, root, "bindings:\n  - profile: alpha\n    match: {channel: web, chat: chat-s}\n")
	u := g.user("chat-s")
	if got := u.ask("hi"); got[len(got)-1].Type != "done" {
		t.Fatalf("first answer: frames %v", frameTypes(got))
	}
	status := func() string {
		t.Helper()
		got := u.ask("/status")
		return got[len(got)-1].Text
	}
	if s := status(); !strings.Contains(s, "Model: test-model (openai)") {
		t.Fatalf("/status before the reload:\n%s", s)
	}
	writeFile(t, filepath.Join(prof, "alpha", "profile.yaml"), "queue_mode: collect\nllm: {model: gpt-4o}\n")
	g.signalReload()
	g.waitLog("reloaded profiles and hooks", 1)
	s := status()
	for _, want := range []string{"Model: gpt-4o (openai)", "of 128,000 tokens", "Queue mode: collect"} {
		if !strings.Contains(s, want) {
			t.Errorf("/status after the reload lacks %q:\n%s", want, s)
		}
	}
	// The next message goes to the new model, the history kept.
	u.ask("again")
	if r := g.lastRequest(); r.Model != "gpt-4o" || len(r.Messages) < 4 {
		t.Errorf("after the reload the model got model %q with %d messages; want gpt-4o with the history", r.Model, len(r.Messages))
	}
}

// TestProfileWithItsOwnServerIsNotSentTheGlobalKey: a profile that points the same provider
// at another server (docs/profiles.md's Ollama example) got the global llm.api_key in
// every request to that server, the OpenAI key included, though it was given for OpenAI.
// A profile that names its own key still sends it.
func TestProfileWithItsOwnServerIsNotSentTheGlobalKey(t *testing.T) {
	root := t.TempDir()
	other := openaitest.NewServer()
	t.Cleanup(other.Close)
	other.SetFunc(func(openaitest.Request) openaitest.Reply { return openaitest.Reply{Text: "from the other server"} })
	prof := filepath.Join(root, "profiles")
	writeFile(t, filepath.Join(prof, "local", "profile.yaml"), "llm: {base_url: \""+other.URL()+"\", model: llama3.2}\n")
	writeFile(t, filepath.Join(prof, "keyed", "profile.yaml"), "llm: {base_url: \""+other.URL()+"\", model: llama3.2, api_key: sk-profile-own}\n")
	// The global section gets a key: the test config has none.
	withKey := func(yaml string) string {
		if !strings.Contains(yaml, "  model: test-model\n") {
			t.Fatalf("the test config changed:\n%s", yaml)
		}
		return strings.Replace(yaml, "  model: test-model\n", "  model: test-model\n  api_key: sk-global-openai\n", 1)
	}
	g := launchGatewayEdited(t, root, "bindings:\n  - profile: local\n    match: {channel: web, chat: chat-l}\n  - profile: keyed\n    match: {channel: web, chat: chat-k}\n",
		1, func(code int, _ string) bool { return code == http.StatusOK }, withKey)
	// The global endpoint still gets the global key.
	if got := g.user("chat-g").ask("hello"); got[len(got)-1].Type != "done" {
		t.Fatalf("global chat: frames %v", frameTypes(got))
	}
	if auth := g.lastRequest().Header.Get("Authorization"); auth != "Bearer sk-global-openai" {
		t.Fatalf("the global endpoint got Authorization %q; want the global key", auth)
	}
	for _, c := range []struct{ chat, auth string }{{"chat-l", ""}, {"chat-k", "Bearer sk-profile-own"}} {
		got := g.user(c.chat).ask("hello")
		if last := got[len(got)-1]; last.Type != "done" || last.Text != "from the other server" {
			t.Fatalf("%s: frames %v, last %+v", c.chat, frameTypes(got), last)
		}
		reqs := other.Requests()
		if auth := reqs[len(reqs)-1].Header.Get("Authorization"); auth != c.auth {
			t.Errorf("%s: the profile's server got Authorization %q; want %q", c.chat, auth, c.auth)
		}
	}
}

// TestReloadReadsAConfigFileWrittenAfterTheStart: README's first step runs the gateway with
// no gateway.yaml; an admin who then writes one (profiles, bindings) beside it and reloads
// expects it read, as a start would read it. The reload read the built-in defaults again,
// answered "reloaded" and left every chat on the built-in profile.
func TestReloadReadsAConfigFileWrittenAfterTheStart(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	oai := openaitest.NewServer()
	t.Cleanup(oai.Close)
	g := &liveGateway{t: t, root: dir, addr: freePort(t), oai: oai, reload: make(chan struct{}, 1), log: &logBuffer{}}
	env := map[string]string{
		"GATEWAY_HTTP_LISTEN": g.addr, "GATEWAY_LOG_FORMAT": "json",
		"GATEWAY_LLM_PROVIDER": "openai", "GATEWAY_LLM_MODEL": "test-model", "GATEWAY_LLM_BASE_URL": oai.URL(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, g.reload, []string{"run"}, io.Discard, g.log, func(k string) string { return env[k] }, slices.Collect(maps.Keys(env)))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("gateway did not shut down within 30s")
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for code, _ := g.get("/readyz"); code != http.StatusOK; code, _ = g.get("/readyz") {
		if time.Now().After(deadline) {
			t.Fatalf("gateway not ready within 15s; log:\n%s", g.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	u := g.user("chat-1")
	u.ask("hello")
	if sys := systemOf(g.lastRequest()); sys != profiles.DefaultSystemPrompt {
		t.Fatalf("before the file: system prompt %q", sys)
	}

	writeFile(t, filepath.Join(dir, "data", "profiles", "desk", "SYSTEM.md"), "You are the desk.\n")
	writeFile(t, filepath.Join(dir, "gateway.yaml"), "bindings:\n  - profile: desk\n    match: {channel: web}\n")
	g.signalReload()
	g.waitLog("reloaded profiles and hooks", 1)
	u.ask("hello again")
	if sys := systemOf(g.lastRequest()); sys != "You are the desk." {
		t.Fatalf("after writing gateway.yaml and reloading: system prompt %q; want the bound profile's", sys)
	}
}
