package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"gateway/harness"
	"gateway/harness/openaitest"
	"gateway/hooks"
	"gateway/profiles"
)

// withOpenAIFake points the gateway at a fake OpenAI API (the real SDK over HTTP) that
// answers summary requests with a summary and chat requests with "answer to <prompt>".
func withOpenAIFake(t *testing.T, window int) (*openaitest.Server, envOpt) {
	t.Helper()
	srv := openaitest.NewServer()
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	n := 0
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		if len(r.Messages) > 0 && strings.Contains(r.Messages[0].Content, "You write summaries") {
			mu.Lock()
			n++
			k := n
			mu.Unlock()
			return openaitest.Reply{Text: fmt.Sprintf("SUMMARY-%d of the chat so far.", k)}
		}
		last := r.Messages[len(r.Messages)-1].Content
		return openaitest.Reply{Text: "answer to " + last[:min(len(last), 16)]}
	})
	return srv, func(c *Config, rt *Runtime, d *Deps) {
		rt.LLM = harness.Config{Provider: "openai", Model: "gpt-test", BaseURL: srv.URL(), ContextWindow: window}
		d.NewProvider = func(cfg harness.Config) (harness.Provider, error) { return harness.NewProvider(cfg, nil) }
	}
}

// counter reads one series of a counter vector.
func counter(c *prometheus.CounterVec, labels []string) float64 {
	var m dto.Metric
	if err := c.WithLabelValues(labels...).Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// say sends text in chat and returns the final frame ("done:…" or "error:…").
func (e *testEnv) say(t *testing.T, chat, id, text string) string {
	t.Helper()
	before := len(e.mem.finals(chat))
	e.mem.inject(t, chat, id, text)
	e.mem.waitDone(t, 1)
	f := e.mem.finals(chat)
	if len(f) != before+1 {
		t.Fatalf("%d answers after %q", len(f), text)
	}
	return f[len(f)-1]
}

// 150 messages in one chat, a model that answers 400 context_length_exceeded above its
// window: every message is answered, the history was compacted, and the metrics count it.
func TestGatewayLongChatAllAnswered(t *testing.T) {
	srv, opt := withOpenAIFake(t, 2500)
	srv.LimitContext(2500)
	e := newEnv(t, opt)
	for i := range 150 {
		text := fmt.Sprintf("msg %03d %s", i, strings.Repeat("talk ", 30))
		got := e.say(t, "c150", fmt.Sprint("m", i), text)
		if got != "done:answer to "+text[:16] {
			t.Fatalf("message %d answered %q", i, got)
		}
	}
	if n := counter(e.metrics.Compactions, []string{"threshold", "done"}) +
		counter(e.metrics.Compactions, []string{"overflow", "done"}); n < 3 {
		t.Fatalf("%v compactions counted", n)
	}
	if in := counter(e.metrics.Tokens, []string{"openai", "gpt-test", "in"}); in <= 0 {
		t.Fatal("no input tokens counted")
	}
	files, _ := filepath.Glob(filepath.Join(e.dir, "mem_c150-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("history files %v", files)
	}
	b, _ := os.ReadFile(files[0])
	if c := strings.Count(string(b), `"type":"compaction"`); c < 3 {
		t.Fatalf("%d compaction entries", c)
	}
	st := e.say(t, "c150", "status", "/status")
	if !strings.Contains(st, "Context: about ") || !strings.Contains(st, "of 2,500 tokens (") || !strings.Contains(st, "Last compaction: 20") {
		t.Fatalf("status %q", st)
	}
}

// /compact summarises on demand (its instructions reach the model) and /status shows it.
func TestGatewayCompactCommand(t *testing.T) {
	srv, opt := withOpenAIFake(t, 0)
	e := newEnv(t, opt)
	if got := e.say(t, "c1", "m0", "/compact"); !strings.Contains(got, "nothing to compact yet") {
		t.Fatalf("empty chat: %q", got)
	}
	for i, text := range []string{"I am Ann", "I live in Rome", "I like trains"} {
		e.say(t, "c1", fmt.Sprint("m", i+1), text)
	}
	if st := e.say(t, "c1", "s1", "/status"); !strings.Contains(st, "Last compaction: none") || !strings.Contains(st, "of 8,192 tokens") {
		t.Fatalf("status before %q", st)
	}
	got := e.say(t, "c1", "m9", "/compact keep the city")
	if !strings.HasPrefix(got, "done:Compacted: 4 earlier messages") {
		t.Fatalf("/compact: %q", got)
	}
	reqs := srv.Requests()
	if last := reqs[len(reqs)-1]; !strings.Contains(last.Messages[1].Content, "keep the city") {
		t.Fatalf("instructions did not reach the summariser: %+v", last.Messages)
	}
	e.say(t, "c1", "m10", "where do I live?")
	reqs = srv.Requests()
	m := reqs[len(reqs)-1].Messages
	if !strings.Contains(m[1].Content, "SUMMARY-1") || m[len(m)-1].Content != "where do I live?" {
		t.Fatalf("after /compact sent %+v", m)
	}
	if st := e.say(t, "c1", "s2", "/status"); !strings.Contains(st, "Last compaction: 20") {
		t.Fatalf("status after %q", st)
	}
	if n := counter(e.metrics.Compactions, []string{"manual", "done"}); n != 1 {
		t.Fatalf("%v manual compactions counted", n)
	}
}

// A profile's idle_reset starts a fresh history for a chat silent longer than it.
func TestGatewayIdleResetFromProfile(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "forgetful"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "forgetful", "profile.yaml"), []byte("idle_reset: 1ns\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := profiles.Load(profiles.Config{Dir: dir, Default: "forgetful"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, opt := withOpenAIFake(t, 0)
	e := newEnv(t, opt, func(c *Config, rt *Runtime, d *Deps) { rt.Profiles = set })
	e.say(t, "c1", "m1", "first topic")
	e.say(t, "c1", "m2", "second topic")
	reqs := srv.Requests()
	m := reqs[len(reqs)-1].Messages
	if m[len(m)-1].Content != "second topic" || len(m) != 2 { // system + the new message
		t.Fatalf("after idle_reset sent %+v", m)
	}
}

// A profile inherits llm.context_window only with the global model: another model has its
// own window (its known default) unless the profile names one.
func TestMergeLLMContextWindow(t *testing.T) {
	base := harness.Config{Provider: "openai", Model: "gpt-4o", ContextWindow: 64000}
	for _, c := range []struct {
		over harness.Config
		want int
	}{
		{harness.Config{}, 64000},
		{harness.Config{Model: "gpt-4o"}, 64000},
		{harness.Config{Model: "llama3.2"}, 0},
		{harness.Config{Model: "llama3.2", ContextWindow: 32000}, 32000},
		{harness.Config{ContextWindow: 16000}, 16000},
	} {
		if got := mergeLLM(base, c.over).ContextWindow; got != c.want {
			t.Errorf("%+v: window %d, want %d", c.over, got, c.want)
		}
	}
}

// An answer the model stopped midway ends as an answer in the chat: every word streamed,
// then why it stops there, so the chat shows what the model's history keeps. Before, an
// error frame replaced the words in the web chat and left a platform's last preview, which
// may lack the last words, with the error below it. The next message is answered as usual.
func TestAnswerCutMidwayKeepsItsWordsAndSaysWhy(t *testing.T) {
	srv, opt := withOpenAIFake(t, 0)
	e := newEnv(t, opt)
	var mu sync.Mutex
	var errs []string
	e.bus.Observe("test", func(_ context.Context, ev hooks.Event) {
		if ge, ok := ev.(*hooks.GatewayError); ok {
			mu.Lock()
			errs = append(errs, ge.Error)
			mu.Unlock()
		}
	})
	srv.Push(openaitest.Reply{Chunks: []string{"The first half ", "and the second ", "half"}, CutAfter: 2})
	got := e.say(t, "cut", "m1", "tell me")
	if got != "done:The first half and the second \n\n(The model stopped answering midway. Please try again.)" {
		t.Fatalf("the chat got %q", got)
	}
	mu.Lock()
	if len(errs) != 1 || !strings.Contains(errs[0], "midway") {
		t.Errorf("gateway:error events %q", errs)
	}
	mu.Unlock()
	if got := e.say(t, "cut", "m2", "go on"); got != "done:answer to go on" {
		t.Fatalf("the next message: %q", got)
	}
}

// An answer cut at the length limit, and an empty one, are told as such in the chat.
// Before, the first looked whole and the second showed nothing at all.
func TestAnswerEndingEarlyIsToldInTheChat(t *testing.T) {
	srv, opt := withOpenAIFake(t, 0)
	e := newEnv(t, opt)
	srv.Push(openaitest.Reply{Text: "Step one, step two,", FinishReason: "length"}, openaitest.Reply{Text: ""})
	if got := e.say(t, "early", "m1", "all the steps"); got != "done:Step one, step two,\n\n(The answer stops here: it reached the length limit of one answer. Ask me to go on.)" {
		t.Fatalf("a cut answer: %q", got)
	}
	if got := e.say(t, "early", "m2", "hello?"); got != "done:The model gave an empty answer. Please try again, or ask differently." {
		t.Fatalf("an empty answer: %q", got)
	}
}

// A profile that names a model and a server but no provider, under a gateway.yaml with no
// model (echo), used to be answered by echo: "no model is configured", its llm section
// silently ignored. It reaches the server it names.
func TestProfileModelWithoutProviderIsNotEcho(t *testing.T) {
	srv, _ := withOpenAIFake(t, 0)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "local"), 0o755)
	yaml := fmt.Sprintf("llm: {model: llama-test, base_url: %q}\n", srv.URL())
	if err := os.WriteFile(filepath.Join(dir, "local", "profile.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := profiles.Load(profiles.Config{Dir: dir, Default: "local"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config, rt *Runtime, d *Deps) {
		rt.Profiles = set
		rt.LLM = harness.Config{Provider: "echo", Model: "echo"}
		d.NewProvider = func(cfg harness.Config) (harness.Provider, error) { return harness.NewProvider(cfg, nil) }
	})
	if got := e.say(t, "c1", "m1", "hello"); got != "done:answer to hello" {
		t.Fatalf("answer %q; want the profile's model to answer", got)
	}
	if reqs := srv.Requests(); len(reqs) != 1 || reqs[0].Model != "llama-test" {
		t.Fatalf("requests to the profile's server: %d; want 1 for llama-test", len(reqs))
	}
}
