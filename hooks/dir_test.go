package hooks

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gateway/channels"
	"gateway/internal/childproc/childproctest"
)

// writeHook makes root/name with HOOK.yaml and, when script is not empty, an executable run.sh.
func writeHook(t testing.TB, root, name, hookYAML, script string) string {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, HookFile), []byte(hookYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	if script != "" {
		if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// loadOne loads root and fails on any load error.
func loadOne(t *testing.T, b *testBus, root string, opts DirOptions) *Dir {
	t.Helper()
	d := LoadDir(b.Bus, root, opts)
	t.Cleanup(d.Close)
	if errs := d.Errors(); len(errs) != 0 {
		t.Fatalf("load errors: %v", errs)
	}
	return d
}

const receiveHook = "events: [message:receive]\ncommand: [./run.sh]\n"

func TestExecHookRejectsWord(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "no-spam", receiveHook, `
if grep -q 'buy now'; then
  printf '{"action": "reject", "reason": "no advertising here"}'
fi
`)
	b := newTestBus(t, 10*time.Second)
	d := loadOne(t, b, root, DirOptions{Source: "dir:" + root})
	if h := d.Hooks(); len(h) != 1 || h[0].Name != "no-spam" || h[0].Kind != KindCommand || h[0].Source != "dir:"+root+"/no-spam" {
		t.Fatalf("hooks = %+v", h)
	}
	rej := b.Receive(ctxT(t), receiveEvent(channels.TextPart("please buy now!")))
	if rej == nil || rej.Reason != "no advertising here" {
		t.Fatalf("reject = %+v", rej)
	}
	ev := receiveEvent(channels.TextPart("hello"))
	if rej := b.Receive(ctxT(t), ev); rej != nil || ev.Text != "hello" {
		t.Errorf("clean message: reject %+v, text %q", rej, ev.Text)
	}
	if fs := b.Failures(); len(fs) != 0 {
		t.Errorf("failures: %+v", fs)
	}
}

func TestExecHookTransformsTextInItsFolder(t *testing.T) {
	root := t.TempDir()
	// The program runs in its folder (pwd) and gets the message on stdin only.
	dir := writeHook(t, root, "shout", receiveHook, `
input=$(cat)
case "$input" in *'"text":"hi; $(touch pwned)"'*) ;; *) echo "stdin lacks the text: $input" >&2; exit 1;; esac
printf '{"action":"transform","text":"%s"}' "$(pwd)"
`)
	b := newTestBus(t, 10*time.Second)
	loadOne(t, b, root, DirOptions{})
	ev := receiveEvent(channels.TextPart("hi; $(touch pwned)"), audio)
	b.Receive(ctxT(t), ev)
	if len(b.Failures()) != 0 {
		t.Fatalf("failures: %+v", b.Failures())
	}
	if ev.Text != dir || len(ev.Parts) != 2 || ev.Parts[1].Path != audio.Path {
		t.Errorf("text %q (want the hook folder %q), parts %+v", ev.Text, dir, ev.Parts)
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Error("message text was run by a shell")
	}
}

func TestExecHookSendAddsPart(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "sig", "events: [message:send]\ncommand: [./run.sh]\n", `
cat >/dev/null
echo '{"parts": [{"type": "text", "text": "-- sent by a hook"}, {"type": "file", "path": "notes.txt"}]}'
`)
	b := newTestBus(t, 10*time.Second)
	loadOne(t, b, root, DirOptions{})
	parts := b.Send(ctxT(t), &MessageSend{ResponseText: "answer"})
	if len(parts) != 2 || parts[0].Text != "-- sent by a hook" {
		t.Fatalf("parts = %+v (failures %+v)", parts, b.Failures())
	}
	if want := filepath.Join(root, "sig", "notes.txt"); parts[1].Path != want {
		t.Errorf("relative path = %q, want %q", parts[1].Path, want)
	}
}

func TestExecHookKilledAtTimeout(t *testing.T) {
	root := t.TempDir()
	dir := writeHook(t, root, "slow", receiveHook+"timeout: 300ms\n", `
sleep 30 &
echo $! > child.pid
wait
echo '{"action":"reject","reason":"too late"}'
`)
	b := newTestBus(t, 10*time.Second)
	loadOne(t, b, root, DirOptions{Source: "dir:hooks"})
	start := time.Now()
	ev := receiveEvent(channels.TextPart("hello"))
	rej := b.Receive(ctxT(t), ev)
	elapsed := time.Since(start)
	if rej != nil || ev.Text != "hello" {
		t.Errorf("reject %+v text %q: the message must pass unchanged", rej, ev.Text)
	}
	if elapsed > 10*time.Second {
		t.Errorf("Receive took %s: the 30s sleep was not cut at the 300ms timeout", elapsed)
	}
	b.onlyFailure(t, "dir:hooks/slow", "timed out")
	// The shell's child is in the hook's process group: it must die too.
	data, err := os.ReadFile(filepath.Join(dir, "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	deadline := time.Now().Add(10 * time.Second)
	for childproctest.Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("child process %d still running after the timeout", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A program that answers and exits while something it started in the background still
// holds its stdout is heard at once: its answer counts, and what it left behind is killed.
func TestExecHookAnswerCountsWhenItLeavesABackgroundProcess(t *testing.T) {
	root := t.TempDir()
	dir := writeHook(t, root, "bg", receiveHook, `
cat >/dev/null
sleep 30 &
echo $! > child.pid
echo '{"action":"reject","reason":"not here"}'
`)
	b := newTestBus(t, 10*time.Second)
	loadOne(t, b, root, DirOptions{Source: "dir:hooks"})
	start := time.Now()
	rej := b.Receive(ctxT(t), receiveEvent(channels.TextPart("hello")))
	if rej == nil || rej.Reason != "not here" {
		t.Fatalf("reject = %+v (failures %+v): the program's answer was lost", rej, b.Failures())
	}
	// Waiting for the background process takes its 30 s; a loaded machine can take
	// seconds to start a shell, so the bound is far from both.
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("Receive took %s: it waited for the background process", elapsed)
	}
	if fs := b.Failures(); len(fs) != 0 {
		t.Errorf("failures: %+v", fs)
	}
	data, err := os.ReadFile(filepath.Join(dir, "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	childproctest.WaitGone(t, pid, "the background process the hook left")
}

// What a program that succeeds writes to stderr reaches the gateway's log, as the docs
// promise for diagnostics, naming the hook.
func TestExecHookStderrOfASuccessIsLogged(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "x", receiveHook, "cat >/dev/null\necho 'checked 1 message' >&2\n")
	b := newTestBus(t, 10*time.Second)
	loadOne(t, b, root, DirOptions{Source: "dir:hooks", Logger: slog.New(slog.NewTextHandler(&b.log, nil))})
	b.Receive(ctxT(t), receiveEvent(channels.TextPart("hello")))
	if got := b.log.String(); !strings.Contains(got, "checked 1 message") || !strings.Contains(got, "source=dir:hooks/x") {
		t.Errorf("log lacks the hook's stderr or its source:\n%s", got)
	}
	if fs := b.Failures(); len(fs) != 0 {
		t.Errorf("failures: %+v", fs)
	}
}

func TestExecHookFailures(t *testing.T) {
	cases := []struct {
		name, script string
		want         []string
	}{
		{"exit", "cat >/dev/null\necho 'cannot reach the filter service' >&2\nexit 3\n",
			[]string{`hook "broken"`, "code 3", "cannot reach the filter service"}},
		{"garbage", "cat >/dev/null\necho 'OK!'\n", []string{`hook "broken"`, "message:receive result", "want a JSON object"}},
		{"huge", "cat >/dev/null\nhead -c 2000000 /dev/zero\n", []string{"more than 1024 KiB"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			writeHook(t, root, "x", "name: broken\n"+receiveHook, c.script)
			b := newTestBus(t, 10*time.Second)
			loadOne(t, b, root, DirOptions{Source: "dir:hooks"})
			ev := receiveEvent(channels.TextPart("hello"))
			if rej := b.Receive(ctxT(t), ev); rej != nil || ev.Text != "hello" {
				t.Errorf("reject %+v text %q", rej, ev.Text)
			}
			b.onlyFailure(t, "dir:hooks/x", c.want...)
		})
	}
}

func TestExecHookGetsDataPartsAsFiles(t *testing.T) {
	root := t.TempDir()
	dir := writeHook(t, root, "stt", receiveHook, `
p=$(grep -o '"path":"[^"]*"' | cut -d'"' -f4)
echo "$p" > seen-path
printf '{"action":"transform","parts":[{"type":"text","text":"%s"},{"type":"audio","mime":"audio/ogg","path":"%s"}]}' "$(cat "$p")" "$p"
`)
	b := newTestBus(t, 10*time.Second)
	loadOne(t, b, root, DirOptions{})
	voice := channels.Part{Type: channels.PartAudio, MIME: "audio/ogg", Data: []byte("pretend opus"), Voice: true}
	ev := receiveEvent(voice)
	b.Receive(ctxT(t), ev)
	if len(b.Failures()) != 0 {
		t.Fatalf("failures: %+v", b.Failures())
	}
	if len(ev.Parts) != 2 || ev.Parts[0].Text != "pretend opus" {
		t.Fatalf("parts = %+v: the program did not read the audio file", ev.Parts)
	}
	if p := ev.Parts[1]; p.Path != "" || string(p.Data) != "pretend opus" {
		t.Errorf("returned temp part = %+v, want the in-memory part back", p)
	}
	seen, _ := os.ReadFile(filepath.Join(dir, "seen-path"))
	if tmp := strings.TrimSpace(string(seen)); tmp == "" {
		t.Error("the program saw no path")
	} else if _, err := os.Stat(tmp); err == nil {
		t.Errorf("temp file %s left behind", tmp)
	}
}

func TestExecHookEnvironment(t *testing.T) {
	t.Setenv("GATEWAY_TEST_SECRET", "s3cret")
	t.Setenv("GATEWAY_TEST_WANTED", "wanted")
	root := t.TempDir()
	dir := writeHook(t, root, "env", "events: [agent_end]\ncommand: [./run.sh]\nenv: [GATEWAY_TEST_WANTED]\n",
		"cat >/dev/null\nenv > env.out\n")
	b := newTestBus(t, 10*time.Second)
	loadOne(t, b, root, DirOptions{})
	b.Emit(ctxT(t), &AgentEnd{})
	out, err := os.ReadFile(filepath.Join(dir, "env.out"))
	if err != nil {
		t.Fatal(err)
	}
	env := string(out)
	for _, want := range []string{"GATEWAY_HOOK_EVENT=agent_end", "GATEWAY_HOOK_NAME=env", "GATEWAY_TEST_WANTED=wanted", "PATH="} {
		if !strings.Contains(env, want) {
			t.Errorf("environment lacks %s", want)
		}
	}
	if strings.Contains(env, "s3cret") {
		t.Error("the gateway's other environment leaked to the hook")
	}
}

func TestObserveAllHook(t *testing.T) {
	root := t.TempDir()
	dir := writeHook(t, root, "log", "events: [\"*\"]\ncommand: [./run.sh]\n",
		"grep -o '\"type\":\"[^\"]*\"' | head -n1 >> events.log\necho 'not a result, ignored'\n")
	b := newTestBus(t, 10*time.Second)
	loadOne(t, b, root, DirOptions{})
	b.Emit(ctxT(t), &GatewayStartup{Channels: []string{"web"}})
	ev := receiveEvent(channels.TextPart("hi"))
	b.Receive(ctxT(t), ev)
	log, _ := os.ReadFile(filepath.Join(dir, "events.log"))
	if got := string(log); got != "\"type\":\"gateway:startup\"\n\"type\":\"message:receive\"\n" {
		t.Errorf("events.log = %q", got)
	}
	if ev.Text != "hi" || len(b.Failures()) != 0 {
		t.Errorf("text %q failures %+v", ev.Text, b.Failures())
	}
}

func TestDirProfileScoping(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "deny", receiveHook, "cat >/dev/null\necho '{\"action\":\"reject\",\"reason\":\"support only\"}'\n")
	b := newTestBus(t, 10*time.Second)
	loadOne(t, b, root, DirOptions{Source: "profile:support:hooks", Profile: "support"})
	other := receiveEvent(channels.TextPart("x"))
	other.Profile = "assistant"
	if rej := b.Receive(ctxT(t), other); rej != nil {
		t.Errorf("hook of profile support ran for profile assistant: %+v", rej)
	}
	mine := receiveEvent(channels.TextPart("x"))
	mine.Profile = "support"
	if rej := b.Receive(ctxT(t), mine); rej == nil || rej.Reason != "support only" {
		t.Errorf("reject = %+v", rej)
	}
	if h := b.Handlers(); len(h) != 1 || h[0].Profile != "support" || h[0].Source != "profile:support:hooks/deny" {
		t.Errorf("handlers = %+v", h)
	}
}

func TestDirCloseRemovesHandlers(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "deny", receiveHook, "cat >/dev/null\necho '{\"action\":\"reject\",\"reason\":\"no\"}'\n")
	writeHook(t, root, "obs", "events: [\"*\"]\ncommand: [./run.sh]\n", "cat >/dev/null\n")
	b := newTestBus(t, 10*time.Second)
	keep := b.Scope("builtin:keep")
	keep.Observe(func(context.Context, Event) {})
	d := loadOne(t, b, root, DirOptions{})
	if n := len(b.Handlers()); n != 3 {
		t.Fatalf("handlers = %d", n)
	}
	d.Close()
	d.Close()
	if h := b.Handlers(); len(h) != 1 || h[0].Source != "builtin:keep" {
		t.Errorf("after Close: %+v", h)
	}
	if rej := b.Receive(ctxT(t), receiveEvent(channels.TextPart("x"))); rej != nil {
		t.Errorf("closed hook still rejects: %+v", rej)
	}
}

func TestDirDisabledAndMissing(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "off", receiveHook+"enabled: false\n", "echo '{\"action\":\"reject\"}'\n")
	b := newTestBus(t, 10*time.Second)
	d := loadOne(t, b, root, DirOptions{})
	if h := d.Hooks(); len(h) != 1 || h[0].Enabled {
		t.Errorf("hooks = %+v, want the disabled hook listed", h)
	}
	if h := b.Handlers(); len(h) != 0 {
		t.Errorf("disabled hook registered %+v", h)
	}
	// Switched off because its program is gone: listed as disabled, not a load error that
	// would refuse a reload.
	writeHook(t, root, "off-gone", "events: [message:receive]\ncommand: [./gone.sh]\nenabled: false\n", "")
	if d := LoadDir(b.Bus, root, DirOptions{}); len(d.Errors()) != 0 || len(d.Hooks()) != 2 || d.Hooks()[1].Enabled {
		t.Errorf("disabled hook without its program: hooks %+v, errors %v", d.Hooks(), d.Errors())
	} else {
		d.Close()
	}
	missing := LoadDir(b.Bus, filepath.Join(root, "nope"), DirOptions{})
	if len(missing.Hooks()) != 0 || len(missing.Errors()) != 0 {
		t.Errorf("missing dir: %+v %+v", missing.Hooks(), missing.Errors())
	}
}

func TestDirLoadErrorsNameTheProblem(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "good", receiveHook+"timeout: 2s\n", "cat\n")
	cases := map[string]struct{ yaml, script, want string }{
		"a-unknown-key":  {"events: [message:receive]\ncomand: [./run.sh]\n", "", `HOOK.yaml:2: comand: unknown key (known: name, events, command, url, timeout, enabled, env, commands, tools, api)`},
		"b-no-events":    {"command: [./run.sh]\n", "cat\n", "events: missing"},
		"c-bad-event":    {"events: [message:recieve]\ncommand: [./run.sh]\n", "cat\n", `HOOK.yaml:1: events[0]: unknown event "message:recieve"`},
		"d-shell-string": {"events: [message:receive]\ncommand: ./run.sh --flag\n", "cat\n", "HOOK.yaml:2: command: expected a list, got text (write a list of arguments"},
		"e-both":         {receiveHook + "url: http://127.0.0.1:1/\n", "cat\n", "either command or url"},
		"f-missing-prog": {"events: [message:receive]\ncommand: [./nothere.sh]\n", "", `program "./nothere.sh" not found`},
		"g-not-exec":     {"events: [message:receive]\ncommand: [./HOOK.yaml]\n", "", "not executable"},
		"h-timeout":      {receiveHook + "timeout: 5\n", "cat\n", `timeout: "5" is not a duration (write e.g. 90s, 30m or 2h)`},
		"i-enabled":      {receiveHook + "enabled: maybe\n", "cat\n", `enabled: expected true or false, got "maybe"`},
		"j-star-mix":     {"events: [\"*\", message:send]\ncommand: [./run.sh]\n", "cat\n", `"*" already observes every event`},
		"k-url-scheme":   {"events: [message:send]\nurl: ftp://x/\n", "", "want an http:// or https:// URL"},
		"l-no-yaml":      {"", "", "no HOOK.yaml"},
		"m-not-yaml":     {"events: [message:receive\n", "", "HOOK.yaml"},
		"n-dup-key":      {receiveHook + "events: [message:send]\n", "cat\n", `events: given twice`},
		"o-no-runner":    {"events: [message:send]\n", "", "command or url is missing"},
		"p-bad-env":      {receiveHook + "env: [\"A B\"]\n", "cat\n", `env[0]: "A B" is not a variable name`},
		"q-bare-name":    {"events: [message:receive]\ncommand: [run.sh]\n", "cat\n", `program "run.sh" not found in PATH; for the run.sh in the hook's folder write ["./run.sh"]`},
	}
	for name, c := range cases {
		dir := writeHook(t, root, name, c.yaml, c.script)
		if name == "l-no-yaml" {
			os.Remove(filepath.Join(dir, HookFile))
		}
	}
	os.WriteFile(filepath.Join(root, "README.md"), []byte("not a hook"), 0o644)
	os.MkdirAll(filepath.Join(root, ".git"), 0o755)

	check := func(t *testing.T, hooks []LoadedHook, errs []LoadError) {
		if len(hooks) != 1 || hooks[0].Name != "good" || hooks[0].Timeout != 2*time.Second {
			t.Errorf("hooks = %+v", hooks)
		}
		got := map[string]string{}
		for _, e := range errs {
			got[filepath.Base(e.Path)] = e.Error()
		}
		names := slices.Sorted(func(yield func(string) bool) {
			for n := range cases {
				if !yield(n) {
					return
				}
			}
		})
		for _, n := range names {
			if msg, ok := got[n]; !ok {
				t.Errorf("%s: loaded without error", n)
			} else if !strings.Contains(msg, cases[n].want) {
				t.Errorf("%s: error %q does not say %q", n, msg, cases[n].want)
			}
		}
		if len(errs) != len(cases) {
			t.Errorf("%d errors for %d broken hooks: %v", len(errs), len(cases), errs)
		}
	}
	t.Run("LoadDir", func(t *testing.T) {
		b := newTestBus(t, 10*time.Second)
		d := LoadDir(b.Bus, root, DirOptions{})
		defer d.Close()
		check(t, d.Hooks(), d.Errors())
		if h := b.Handlers(); len(h) != 1 || !strings.HasSuffix(h[0].Source, "/good") {
			t.Errorf("handlers = %+v: only the good hook should register", h)
		}
	})
}

func TestURLHook(t *testing.T) {
	type seen struct {
		event, contentType string
		body               map[string]any
	}
	got := make(chan seen, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		got <- seen{r.Header.Get("X-Gateway-Event"), r.Header.Get("Content-Type"), body}
		switch r.URL.Path {
		case "/ok":
			io.WriteString(w, `{"action": "transform", "text": "via http"}`)
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		default:
			http.Error(w, "filter exploded", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()

	root := t.TempDir()
	writeHook(t, root, "a-ok", "events: [message:receive]\nurl: "+srv.URL+"/ok\n", "")
	writeHook(t, root, "b-empty", "events: [message:receive]\nurl: "+srv.URL+"/empty\n", "")
	writeHook(t, root, "c-fail", "events: [message:receive]\nurl: "+srv.URL+"/fail?token=hunter2\n", "")
	b := newTestBus(t, 10*time.Second)
	d := loadOne(t, b, root, DirOptions{Source: "dir:hooks"})
	if k := d.Hooks()[0].Kind; k != KindURL {
		t.Errorf("kind = %q", k)
	}
	ev := receiveEvent(channels.TextPart("hello"))
	b.Receive(ctxT(t), ev)
	if ev.Text != "via http" {
		t.Errorf("text = %q", ev.Text)
	}
	first := <-got
	if first.event != NameMessageReceive || first.contentType != "application/json" ||
		first.body["type"] != NameMessageReceive || first.body["version"] != 1.0 || first.body["text"] != "hello" {
		t.Errorf("request = %+v", first)
	}
	f := b.onlyFailure(t, "dir:hooks/c-fail", "500", "filter exploded", "/fail")
	if strings.Contains(f.err.Error(), "hunter2") || strings.Contains(b.log.String(), "hunter2") {
		t.Errorf("URL query leaked: %v", f.err)
	}
}

func TestURLHookTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then the server notices the client hanging up
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer srv.Close()
	root := t.TempDir()
	writeHook(t, root, "slow", "events: [message:send]\nurl: "+srv.URL+"\ntimeout: 200ms\n", "")
	b := newTestBus(t, 10*time.Second)
	loadOne(t, b, root, DirOptions{Source: "dir:hooks"})
	if parts := b.Send(ctxT(t), &MessageSend{}); parts != nil {
		t.Errorf("parts = %+v", parts)
	}
	b.onlyFailure(t, "dir:hooks/slow", "timed out")
}

// BenchmarkHookCall compares one message:receive through an exec hook with an in-process
// handler; p50/p99 are per call.
func BenchmarkHookCall(b *testing.B) {
	run := func(b *testing.B, bus *Bus) {
		ctx := context.Background()
		var durs []time.Duration
		for b.Loop() {
			ev := receiveEvent(channels.TextPart("hello"))
			start := time.Now()
			bus.Receive(ctx, ev)
			durs = append(durs, time.Since(start))
			if ev.Text != "HELLO" {
				b.Fatalf("text = %q", ev.Text)
			}
		}
		sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
		b.ReportMetric(float64(durs[len(durs)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(durs[len(durs)*99/100].Microseconds()), "p99-µs")
	}
	b.Run("exec", func(b *testing.B) {
		root := b.TempDir()
		writeHook(b, root, "up", receiveHook, "cat >/dev/null\necho '{\"action\":\"transform\",\"text\":\"HELLO\"}'\n")
		bus := NewBus(Options{})
		d := LoadDir(bus, root, DirOptions{})
		defer d.Close()
		run(b, bus)
	})
	b.Run("in-process", func(b *testing.B) {
		bus := NewBus(Options{})
		bus.On(NameMessageReceive, "up", func(ctx context.Context, ev Event) (any, error) {
			return &ReceiveResult{Action: ActionTransform, Text: strings.ToUpper(ev.(*MessageReceive).Text)}, nil
		})
		run(b, bus)
	})
}

// TestRelativeHookDirRuns: a relative hooks dir (as the default `./data/hooks`) and the docs' `command:
// ["./run.sh"]`, loaded from a working directory that is not the hook folder. The program
// runs in its folder, so both paths must be made absolute at load or every call fails and
// the rejecting hook lets the message through.
func TestRelativeHookDirRuns(t *testing.T) {
	root := t.TempDir()
	writeHook(t, filepath.Join(root, "hooks"), "10-no-secrets", receiveHook, `
if grep -q 'password'; then
  printf '{"action": "reject", "reason": "no secrets here"}'
fi
`)
	writeHook(t, filepath.Join(root, "hooks"), "20-missing", "events: [message:receive]\ncommand: [./nothere.sh]\n", "")
	t.Chdir(root)
	for _, dir := range []string{"./hooks", "hooks"} {
		t.Run(dir, func(t *testing.T) {
			hooks, errs := scanOnly(dir)
			if len(hooks) != 1 || hooks[0].Name != "10-no-secrets" || len(errs) != 1 || !strings.Contains(errs[0].Error(), `program "./nothere.sh" not found`) {
				t.Fatalf("scan of %q = %+v, %v; want the good hook loaded and the missing program reported", dir, hooks, errs)
			}
			b := newTestBus(t, 10*time.Second)
			d := LoadDir(b.Bus, dir, DirOptions{})
			defer d.Close()
			if len(d.Errors()) != 1 {
				t.Fatalf("load errors: %v", d.Errors())
			}
			rej := b.Receive(ctxT(t), receiveEvent(channels.TextPart("my password is hunter2")))
			if rej == nil || rej.Reason != "no secrets here" {
				t.Fatalf("reject = %+v, failures %+v; want the hook to reject", rej, b.Failures())
			}
			if fs := b.Failures(); len(fs) != 0 {
				t.Errorf("failures: %+v", fs)
			}
		})
	}
}

// TestHookFileUsesTheSharedDecoder: HOOK.yaml follows the rules of gateway.yaml and
// profile.yaml: ${VAR} expands, an unset one is an error with file, line and key, and an
// unknown key nested in a value is named by its path.
func TestHookFileUsesTheSharedDecoder(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "set", "events: [message:send]\nurl: \"http://${HOOK_TEST_HOST}/hook\"\n", "")
	writeHook(t, root, "unset", "events: [message:send]\n\nurl: \"http://${HOOK_TEST_UNSET}/hook\"\n", "")
	env := map[string]string{"HOOK_TEST_HOST": "127.0.0.1:9"}
	b := newTestBus(t, 10*time.Second)
	d := LoadDir(b.Bus, root, DirOptions{Getenv: func(k string) string { return env[k] }})
	defer d.Close()
	if h := d.Hooks(); len(h) != 1 || h[0].Name != "set" {
		t.Fatalf("hooks = %+v; want only the hook whose variable is set", h)
	}
	errs := d.Errors()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "HOOK.yaml:3: url: environment variable HOOK_TEST_UNSET is not set") {
		t.Fatalf("errors = %v; want the unset variable named with its line and key", errs)
	}
}

// scanOnly reads dir as LoadDir does, registering nothing.
func scanOnly(dir string) ([]LoadedHook, []LoadError) {
	specs, errs := scanDir(dir, "dir:"+dir, nil)
	hooks := make([]LoadedHook, 0, len(specs))
	for _, s := range specs {
		hooks = append(hooks, s.LoadedHook)
	}
	return hooks, errs
}

// A URL hook's redirect is the hook's failure, never a second request: a followed 302
// would resend the event as a GET to wherever the hook's server points. The gateway hands
// LoadDir its own shared client, which follows redirects, so both cases are checked.
func TestURLHookDoesNotFollowRedirects(t *testing.T) {
	for name, client := range map[string]*http.Client{"default client": nil, "gateway's client": {}} {
		t.Run(name, func(t *testing.T) {
			var other atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/other" {
					other.Add(1)
					io.WriteString(w, `{"parts": [{"type": "text", "text": "from the redirect"}]}`)
					return
				}
				http.Redirect(w, r, "/other", http.StatusFound)
			}))
			defer srv.Close()
			root := t.TempDir()
			writeHook(t, root, "urlhook", "events: [message:send]\nurl: "+srv.URL+"/hook\n", "")
			b := newTestBus(t, 10*time.Second)
			loadOne(t, b, root, DirOptions{Source: "dir:hooks", HTTPClient: client})
			if parts := b.Send(ctxT(t), &MessageSend{}); parts != nil {
				t.Errorf("parts = %+v, want none from a redirecting hook", parts)
			}
			if n := other.Load(); n != 0 {
				t.Errorf("the redirect target got %d requests, want 0", n)
			}
			b.onlyFailure(t, "dir:hooks/urlhook", "status 302", "/hook")
		})
	}
}
