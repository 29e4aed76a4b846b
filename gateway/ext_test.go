package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"gateway/harness"
	"gateway/harness/openaitest"
	"gateway/hooks"
)

// needPython skips a test of a python3 example where python3 is missing (never in CI).
func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not installed; CI must install it (.ci/run)")
		}
		t.Skip("python3 not installed")
	}
}

// withHookDirs loads hook directories into the runtime, with its command registry.
func withHookDirs(t *testing.T, dirs ...string) envOpt {
	return withHookDirsEnv(t, nil, dirs...)
}

// withHookDirsEnv also gives hooks with api: true the admin API's address and token.
func withHookDirsEnv(t *testing.T, apiEnv []string, dirs ...string) envOpt {
	return func(c *Config, rt *Runtime, d *Deps) {
		if rt.Commands == nil {
			rt.Commands = NewCommandRegistry()
		}
		for _, dir := range dirs {
			hd := hooks.LoadDir(rt.Bus, dir, hooks.DirOptions{Registry: rt.Commands, APIEnv: func() []string { return apiEnv }})
			if errs := hd.Errors(); len(errs) > 0 {
				t.Fatalf("hooks of %s: %v", dir, errs)
			}
			t.Cleanup(hd.Close)
		}
	}
}

// withProvider points the gateway at a fake OpenAI API (the real SDK over HTTP).
func withProvider(srv *openaitest.Server) envOpt {
	return func(c *Config, rt *Runtime, d *Deps) {
		rt.LLM = harness.Config{Provider: "openai", Model: "gpt-test", BaseURL: srv.URL()}
		d.NewProvider = func(cfg harness.Config) (harness.Provider, error) { return harness.NewProvider(cfg, nil) }
	}
}

// exampleHook copies one folder of examples/hooks into a hook directory of its own. Its
// timeouts are raised to 20 s: Python takes 0.4 s to start on a quiet CI machine and
// several seconds beside the race-detected test binaries, and what these tests check is
// the example's work, not how fast the machine starts it.
func exampleHook(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, name), os.DirFS(filepath.Join("..", "examples", "hooks", name))); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, name, "HOOK.yaml")
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`timeout: \d+s`).ReplaceAll(b, []byte("timeout: 20s"))
	if err := os.WriteFile(manifest, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The shipped /pop example, end to end through the web chat and the real OpenAI SDK:
// /pop 2 is answered without the model, leaves a stack_pop entry in the history file,
// and the next request lacks the popped turns but carries their summary.
func TestExamplePopEndToEnd(t *testing.T) {
	needPython(t)
	srv := openaitest.NewServer()
	t.Cleanup(srv.Close)
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		// The prompt is the last paragraph: the summary /pop puts before it arrives in the
		// same user message (consecutive user messages are sent as one).
		last := r.Messages[len(r.Messages)-1].Content
		if i := strings.LastIndex(last, "\n\n"); i >= 0 {
			last = last[i+2:]
		}
		return openaitest.Reply{Text: "ok: " + last}
	})
	e := newEnv(t, withProvider(srv), withHookDirs(t, exampleHook(t, "pop")))
	c := e.client(t, "popchat")
	c.say("/help")
	if fs := c.until("done", "error"); !strings.Contains(fs[len(fs)-1].Text, "/pop — go back N turns") ||
		!strings.Contains(fs[len(fs)-1].Text, "/compact [instructions] — summarise") {
		t.Fatalf("/help: %+v", fs)
	}
	for _, text := range []string{"alpha: plan the trip", "beta: pick a hotel", "gamma: book the train"} {
		c.say(text)
		if fs := c.until("done", "error"); fs[len(fs)-1].Text != "ok: "+text {
			t.Fatalf("%q answered %+v", text, fs)
		}
	}
	before := len(srv.Requests())
	c.say("/pop 2")
	fs := c.until("done", "error")
	if last := fs[len(fs)-1]; last.Type != "done" || !strings.Contains(last.Text, "Went back 2 turns") {
		t.Fatalf("/pop 2 answered %+v", fs)
	}
	if n := len(srv.Requests()); n != before {
		t.Fatalf("/pop reached the model: %d requests, want %d", n, before)
	}
	files, _ := filepath.Glob(filepath.Join(e.dir, "web_popchat-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("history files %v", files)
	}
	b, _ := os.ReadFile(files[0])
	if !strings.Contains(string(b), `"type":"stack_pop"`) || !strings.Contains(string(b), "the user said: beta: pick a hotel") {
		t.Fatalf("no stack_pop entry in the history:\n%s", b)
	}

	c.say("delta: what next?")
	if fs := c.until("done", "error"); fs[len(fs)-1].Text != "ok: delta: what next?" {
		t.Fatalf("after /pop: %+v", fs)
	}
	reqs := srv.Requests()
	var seen []string
	for _, m := range reqs[len(reqs)-1].Messages {
		seen = append(seen, m.Role+": "+m.Content)
	}
	all := strings.Join(seen, "\n")
	for _, want := range []string{"alpha: plan the trip", "ok: alpha: plan the trip", "set aside", "the user said: beta: pick a hotel", "the user said: gamma: book the train", "delta: what next?"} {
		if !strings.Contains(all, want) {
			t.Errorf("the request after /pop lacks %q:\n%s", want, all)
		}
	}
	for _, gone := range []string{"user: beta: pick a hotel", "assistant: ok: beta", "user: gamma: book the train", "assistant: ok: gamma"} {
		if strings.Contains(all, gone) {
			t.Errorf("the request after /pop still has %q:\n%s", gone, all)
		}
	}
}

// A hook tool through the real SDK: the model sees it, calls it, and the program's answer
// is in the next request.
func TestExampleCalcTool(t *testing.T) {
	needPython(t)
	srv := openaitest.NewServer()
	t.Cleanup(srv.Close)
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		last := r.Messages[len(r.Messages)-1]
		if last.Role == "tool" {
			return openaitest.Reply{Text: "the tool said " + last.Content}
		}
		return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "call_7", Name: "calc", Arguments: `{"expression":"6*7"}`}}}
	})
	e := newEnv(t, withProvider(srv), withHookDirs(t, exampleHook(t, "calc")))
	c := e.client(t, "calcchat")
	c.say("what is six times seven?")
	fs := c.until("done", "error")
	if last := fs[len(fs)-1]; last.Text != "the tool said 6*7 = 42" {
		t.Fatalf("answer %+v", fs)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || !slices.Contains(reqs[0].Tools, "calc") {
		t.Fatalf("requests %+v", reqs)
	}
	m := reqs[1].Messages[len(reqs[1].Messages)-1]
	if m.Role != "tool" || m.ToolCallID != "call_7" || m.Content != "6*7 = 42" {
		t.Fatalf("tool result in the next request: %+v", m)
	}
}

// A blocking tool_call hook keeps a hook tool's program from running; the model gets the
// reason. tool_result hooks see the tool's answer.
func TestHookToolBlockedAndPatched(t *testing.T) {
	root := t.TempDir()
	marker := filepath.Join(t.TempDir(), "ran")
	os.MkdirAll(filepath.Join(root, "touch"), 0o755)
	os.WriteFile(filepath.Join(root, "touch", "HOOK.yaml"), []byte(`tools:
  - {name: touch_it, description: leaves a mark, timeout: 3s}
command: [./run.sh]
`), 0o644)
	os.WriteFile(filepath.Join(root, "touch", "run.sh"), []byte("#!/bin/sh\ncat >/dev/null\ntouch "+marker+"\necho '{\"content\":\"marked\"}'\n"), 0o755)
	srv := openaitest.NewServer()
	t.Cleanup(srv.Close)
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		last := r.Messages[len(r.Messages)-1]
		if last.Role == "tool" {
			return openaitest.Reply{Text: "result: " + last.Content}
		}
		return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "c1", Name: "touch_it", Arguments: `{}`}}}
	})
	var block atomic.Bool
	block.Store(true)
	e := newEnv(t, withProvider(srv), withHookDirs(t, root), func(c *Config, rt *Runtime, d *Deps) {
		rt.Bus.On(hooks.NameToolCall, "test:guard", func(ctx context.Context, ev hooks.Event) (any, error) {
			if block.Load() {
				return &hooks.ToolCallResult{Block: true, Reason: "not in this chat"}, nil
			}
			return nil, nil
		})
		rt.Bus.On(hooks.NameToolResult, "test:patch", func(ctx context.Context, ev hooks.Event) (any, error) {
			r := ev.(*hooks.ToolResult)
			s := r.Content + " (checked)"
			return &hooks.ToolResultPatch{Content: &s}, nil
		})
	})
	if got := e.say(t, "tb", "m1", "go"); got != "done:result: not in this chat (checked)" {
		t.Fatalf("blocked: %q", got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the blocked tool's program ran")
	}
	block.Store(false)
	if got := e.say(t, "tb", "m2", "again"); got != "done:result: marked (checked)" {
		t.Fatalf("allowed: %q", got)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the allowed tool's program did not run")
	}
}

// The reminder example: /remind answers at once; later its background process delivers
// the text through the admin API (POST /api/v1/send with the token it was given).
func TestExampleRemindUsesAPI(t *testing.T) {
	needPython(t)
	var h atomic.Value
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.Load().(http.Handler).ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	e := newEnv(t, withHookDirsEnv(t, []string{"GATEWAY_API_URL=" + front.URL + "/api/v1", "GATEWAY_API_TOKEN=tok"}, exampleHook(t, "remind")))
	h.Store(e.g.Handler(HTTPOptions{AdminToken: "tok"}))
	if got := e.say(t, "r1", "m1", "/remind 1s stretch your legs"); got != "done:OK, I'll remind you in 1s." {
		t.Fatalf("/remind: %q", got)
	}
	e.mem.waitDone(t, 1)
	if f := e.mem.finals("r1"); len(f) != 2 || f[1] != "done:⏰ stretch your legs" {
		t.Fatalf("chat got %v", f)
	}
	if len(e.fake.Requests()) != 0 {
		t.Fatal("the reminder reached the model")
	}
}

// A hook command answering both text and a prompt: the text reaches the chat as a message
// of its own before the model's answer. As a status line it would be dropped by Telegram
// and Discord, and removed by the web page when the answer ends.
func TestHookCommandTextWithAPromptReachesTheChat(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "brief"), 0o755)
	os.WriteFile(filepath.Join(root, "brief", "HOOK.yaml"), []byte("commands: [{name: brief, description: a briefing}]\ncommand: [./run.sh]\n"), 0o644)
	os.WriteFile(filepath.Join(root, "brief", "run.sh"), []byte("#!/bin/sh\ncat >/dev/null\necho '{\"text\":\"Fetching the news first.\",\"prompt\":\"brief me\"}'\n"), 0o755)
	srv := openaitest.NewServer()
	t.Cleanup(srv.Close)
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		return openaitest.Reply{Text: "asked: " + r.Messages[len(r.Messages)-1].Content}
	})
	e := newEnv(t, withProvider(srv), withHookDirs(t, root))
	c := e.client(t, "briefchat")
	c.say("/brief")
	fs := c.until("done", "error")
	if last := fs[len(fs)-1]; last.Type != "done" || last.Text != "asked: brief me" {
		t.Fatalf("answer %+v", fs)
	}
	for _, f := range fs {
		if f.Type == "parts" && len(f.Parts) == 1 && f.Parts[0]["type"] == "text" && f.Parts[0]["text"] == "Fetching the news first." {
			return
		}
	}
	t.Fatalf("the command's text did not reach the chat as a message: %+v", fs)
}
