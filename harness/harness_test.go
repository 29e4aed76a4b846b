package harness_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gateway/harness"
	"gateway/harness/anthropictest"
	"gateway/harness/openaitest"
	"gateway/hooks"
	"gateway/internal/fakeserver"
	"gateway/internal/llm"
	"gateway/internal/logbuf"
	"gateway/internal/secret"
)

const testKey = "sk-test-0123456789abcdef"

// updates collects a run's updates; safe for the run goroutine and the test to share.
type updates struct {
	mu   sync.Mutex
	list []harness.Update
}

func (u *updates) on(x harness.Update) {
	u.mu.Lock()
	u.list = append(u.list, x)
	u.mu.Unlock()
}

func (u *updates) of(kind harness.UpdateKind) []harness.Update {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []harness.Update
	for _, x := range u.list {
		if x.Kind == kind {
			out = append(out, x)
		}
	}
	return out
}

func openStore(t testing.TB) *harness.Store {
	t.Helper()
	st, err := harness.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openSession(t testing.TB, opts harness.SessionOptions) *harness.Session {
	t.Helper()
	if opts.Key == "" {
		opts.Key = "test:1"
	}
	s, err := harness.OpenSession(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openAI(t *testing.T, srv *openaitest.Server) harness.Provider {
	t.Helper()
	p, err := harness.NewProvider(harness.Config{Provider: "openai", Model: "gpt-test", BaseURL: srv.URL(), APIKey: secret.Secret(testKey)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newOpenAIServer(t *testing.T) *openaitest.Server {
	srv := openaitest.NewServer()
	t.Cleanup(srv.Close)
	return srv
}

func TestOpenAIStreamingDeltasArriveInOrder(t *testing.T) {
	srv := newOpenAIServer(t)
	chunks := []string{"Hel", "lo, ", "wor", "ld", "!"}
	srv.Push(openaitest.Reply{Chunks: chunks, ChunkDelay: 5 * time.Millisecond})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv), System: "Be brief."})

	var u updates
	res, err := s.Run(context.Background(), "hi", u.on)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range u.of(harness.UpdateDelta) {
		got = append(got, d.Text)
	}
	if !slices.Equal(got, chunks) {
		t.Fatalf("deltas = %q, want %q", got, chunks)
	}
	if res.Text != "Hello, world!" || res.Aborted {
		t.Fatalf("result = %+v", res)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if !r.Stream || r.Model != "gpt-test" || r.Path != "/v1/chat/completions" {
		t.Fatalf("request = stream %v model %q path %q", r.Stream, r.Model, r.Path)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+testKey {
		t.Fatalf("Authorization = %q", got)
	}
	if len(r.Messages) != 2 || r.Messages[0].Role != "system" || r.Messages[0].Content != "Be brief." ||
		r.Messages[1].Role != "user" || r.Messages[1].Content != "hi" {
		t.Fatalf("messages = %+v", r.Messages)
	}
}

func TestOpenAIToolCallRoundTrip(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(
		openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "call_abc", Name: "current_time", Arguments: `{"timezone":"UTC"}`}}},
		openaitest.Reply{Text: "It is late."},
	)
	tools, err := harness.BuiltinTools([]string{"current_time"})
	if err != nil {
		t.Fatal(err)
	}
	bus := hooks.NewBus(hooks.Options{})
	var mu sync.Mutex
	var events []string
	bus.Observe("test", func(_ context.Context, ev hooks.Event) {
		mu.Lock()
		events = append(events, ev.EventName())
		mu.Unlock()
	})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv), Tools: tools, Bus: bus})

	var u updates
	res, err := s.Run(context.Background(), "what time is it?", u.on)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "It is late." {
		t.Fatalf("text = %q", res.Text)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if !slices.Equal(reqs[0].Tools, []string{"current_time"}) {
		t.Fatalf("tools offered = %v", reqs[0].Tools)
	}
	m := reqs[1].Messages
	if len(m) != 3 {
		t.Fatalf("second request messages = %+v", m)
	}
	if m[1].Role != "assistant" || len(m[1].ToolCalls) != 1 || m[1].ToolCalls[0].ID != "call_abc" ||
		m[1].ToolCalls[0].Name != "current_time" || m[1].ToolCalls[0].Arguments != `{"timezone":"UTC"}` {
		t.Fatalf("assistant message = %+v", m[1])
	}
	year := time.Now().UTC().Format("2006")
	if m[2].Role != "tool" || m[2].ToolCallID != "call_abc" || !strings.Contains(m[2].Content, year) {
		t.Fatalf("tool message = %+v", m[2])
	}
	starts, ends := u.of(harness.UpdateToolStart), u.of(harness.UpdateToolEnd)
	if len(starts) != 1 || len(ends) != 1 || starts[0].ToolName != "current_time" || ends[0].IsError {
		t.Fatalf("tool updates: start %+v end %+v", starts, ends)
	}
	mu.Lock()
	defer mu.Unlock()
	call, result := slices.Index(events, hooks.NameToolCall), slices.Index(events, hooks.NameToolResult)
	if call < 0 || result < call {
		t.Fatalf("tool events out of order: %v", events)
	}
}

func TestOpenAIServerErrorsRetriedThenReadableError(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.FailNext(3, fakeserver.Failure{Status: 500})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv), MaxRetries: 2})

	var u updates
	_, err := s.Run(context.Background(), "hello", u.on)
	if err == nil {
		t.Fatal("want an error")
	}
	msg := err.Error()
	for _, want := range []string{"HTTP 500", "after 3 attempts", "Please try again"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, testKey) {
		t.Fatalf("error leaks the key: %q", msg)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	if st := u.of(harness.UpdateStatus); len(st) != 2 || !strings.Contains(st[0].Text, "retrying") {
		t.Fatalf("status updates = %+v", st)
	}

	// The provider recovered: the next run works and still sees the first message, with
	// the new one in the same user message (the roles alternate).
	res, err := s.Run(context.Background(), "again", nil)
	if err != nil || res.Text != "ok" {
		t.Fatalf("next run: %+v, %v", res, err)
	}
	reqs := srv.Requests()
	last := reqs[len(reqs)-1].Messages
	if len(last) != 1 || last[0].Content != "hello\n\nagain" {
		t.Fatalf("next run sent %+v", last)
	}
}

// A message whose run failed (after more than one attempt) and that the user then sends
// again, as told, is asked of the model once, also after a restart; the failed attempt
// stays in the file. Before, the model read it twice in a row.
func TestMessageSentAgainAfterAFailureIsAskedOnce(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.FailNext(2, fakeserver.Failure{Status: 500})
	st := openStore(t)
	opts := harness.SessionOptions{Key: "web:again", Store: st, Provider: openAI(t, srv), MaxRetries: 1}
	s := openSession(t, opts)
	if _, err := s.Run(context.Background(), "What is the capital of Peru?", nil); err == nil || !strings.Contains(err.Error(), "Please try again") {
		t.Fatalf("err = %v", err)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}
	res, err := s.Run(context.Background(), "What is the capital of Peru?", nil)
	if err != nil || res.Text != "ok" {
		t.Fatalf("sent again: %q %v", res.Text, err)
	}
	reqs := srv.Requests()
	if m := reqs[len(reqs)-1].Messages; len(m) != 1 || m[0].Content != "What is the capital of Peru?" {
		t.Fatalf("the model was sent %+v", m)
	}
	s2 := openSession(t, opts)
	if n := s2.Stats().Messages; n != 2 {
		t.Fatalf("reopened history has %d messages on its branch, want 2", n)
	}
	if _, err := s2.Run(context.Background(), "And of Chile?", nil); err != nil {
		t.Fatal(err)
	}
	reqs = srv.Requests()
	if m := reqs[len(reqs)-1].Messages; len(m) != 3 || m[0].Content != "What is the capital of Peru?" || m[1].Content != "ok" {
		t.Fatalf("after a restart the model was sent %+v", m)
	}
}

// An answer cut midway by the provider, its question then sent again as the user is told:
// the model is asked it once, without the cut answer (which stays in the file). A question
// that differs goes on after the cut answer, as before.
func TestQuestionSentAgainAfterACutAnswerIsAskedOnce(t *testing.T) {
	srv := newOpenAIServer(t)
	s := openSession(t, harness.SessionOptions{Key: "web:cut", Store: openStore(t), Provider: openAI(t, srv)})
	srv.Push(openaitest.Reply{Chunks: []string{"Lima is ", "the capital ", "of"}, CutAfter: 2})
	if _, err := s.Run(context.Background(), "What is the capital of Peru?", nil); err == nil || !strings.Contains(err.Error(), "midway") {
		t.Fatalf("err = %v", err)
	}
	srv.Push(openaitest.Reply{Text: "Lima."})
	if res, err := s.Run(context.Background(), "What is the capital of Peru?", nil); err != nil || res.Text != "Lima." {
		t.Fatalf("sent again: %q %v", res.Text, err)
	}
	reqs := srv.Requests()
	if m := reqs[len(reqs)-1].Messages; len(m) != 1 || m[0].Content != "What is the capital of Peru?" {
		t.Fatalf("the model was sent %+v", m)
	}
	srv.Push(openaitest.Reply{Chunks: []string{"Santiago ", "is"}, CutAfter: 1}, openaitest.Reply{Text: "Yes."})
	if _, err := s.Run(context.Background(), "And of Chile?", nil); err == nil {
		t.Fatal("want the cut answer's error")
	}
	if _, err := s.Run(context.Background(), "Go on.", nil); err != nil {
		t.Fatal(err)
	}
	reqs = srv.Requests()
	if m := reqs[len(reqs)-1].Messages; len(m) != 5 || m[3].Role != "assistant" || m[3].Content != "Santiago " || m[4].Content != "Go on." {
		t.Fatalf("after a cut answer the model was sent %+v", m)
	}
}

func TestOpenAIRetryAfterIsHonoured(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.FailNext(1, fakeserver.Failure{RetryAfter: time.Second})
	s := openSession(t, harness.SessionOptions{Provider: openAI(t, srv)})
	var u updates
	res, err := s.Run(context.Background(), "hi", u.on)
	if err != nil || res.Text != "ok" {
		t.Fatalf("run: %+v, %v", res, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if gap := reqs[1].Time.Sub(reqs[0].Time); gap < time.Second {
		t.Fatalf("second attempt after %v, before the 1s Retry-After", gap)
	}
	if st := u.of(harness.UpdateStatus); len(st) != 1 || !strings.Contains(st[0].Text, "retrying in 1s") {
		t.Fatalf("status = %+v", st)
	}
}

func TestOpenAIUnauthorizedIsNotRetried(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(openaitest.Reply{Status: 401, Message: "Incorrect API key provided: " + testKey})
	s := openSession(t, harness.SessionOptions{Provider: openAI(t, srv)})
	_, err := s.Run(context.Background(), "hi", nil)
	if err == nil || !strings.Contains(err.Error(), "rejected the API key") {
		t.Fatalf("err = %v", err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
	var pe *harness.ProviderError
	if !errors.As(err, &pe) || pe.Status != 401 {
		t.Fatalf("err = %#v", err)
	}
	// Neither the text nor the wrapped cause nor the provider's message carries the key.
	for _, s := range []string{err.Error(), pe.Message, pe.Err.Error()} {
		if strings.Contains(s, testKey) {
			t.Fatalf("key leaked in %q", s)
		}
	}
}

// OpenAI answers an account without credit 429 insufficient_quota: the user is told that
// the quota is used up, at once, not that the model is busy after retries that cannot help.
func TestOpenAIQuotaUsedUpIsToldAndNotRetried(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(openaitest.Reply{Status: 429, Code: "insufficient_quota",
		Message: "You exceeded your current quota, please check your plan and billing details."})
	s := openSession(t, harness.SessionOptions{Provider: openAI(t, srv)})
	var u updates
	_, err := s.Run(context.Background(), "hi", u.on)
	if err == nil || !strings.Contains(err.Error(), "used up its quota or credit") || !strings.Contains(err.Error(), "check your plan and billing") ||
		strings.Contains(err.Error(), "try again") {
		t.Fatalf("err = %v", err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
	if st := u.of(harness.UpdateStatus); len(st) != 0 {
		t.Fatalf("the chat was shown %+v", st)
	}
}

func TestOpenAIBadRequestShowsProviderMessageWithoutKey(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(openaitest.Reply{Status: 400, Message: "model gpt-test does not exist for key " + testKey})
	s := openSession(t, harness.SessionOptions{Provider: openAI(t, srv)})
	_, err := s.Run(context.Background(), "hi", nil)
	if err == nil || !strings.Contains(err.Error(), "does not exist") || strings.Contains(err.Error(), testKey) {
		t.Fatalf("err = %v", err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
}

// A proxy's error page is not OpenAI's JSON: its status still decides (a 502 is tried
// again, a 404 is not) and its text is what the user is told.
func TestOpenAIErrorPageOfAProxyIsClassifiedByItsStatus(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(openaitest.Reply{Status: 502, ErrorPage: "<html><body>502 Bad Gateway</body></html>"})
	s := openSession(t, harness.SessionOptions{Provider: openAI(t, srv)})
	res, err := s.Run(context.Background(), "hi", nil)
	if err != nil || res.Text != "ok" {
		t.Fatalf("run after a 502 page: %+v, %v", res, err)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Fatalf("%d attempts after a 502 page, want 2", n)
	}

	srv.Push(openaitest.Reply{Status: 404, ErrorPage: "no route for /v1/chat/completions on this proxy"})
	_, err = s.Run(context.Background(), "again", nil)
	var pe *harness.ProviderError
	if !errors.As(err, &pe) || pe.Status != 404 || !strings.Contains(err.Error(), "no route for /v1/chat/completions") {
		t.Fatalf("err after a 404 page = %v", err)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("%d attempts in all, want 3: a 404 is not tried again", n)
	}
}

// A server that fails in the middle of a stream says so in an event of it. Before any
// text, the call is tried again; after some, the user is told the answer broke off, and
// the part that came is not taken for the whole answer.
func TestOpenAIErrorEventInTheStream(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(openaitest.Reply{StreamError: "the model is overloaded"}, openaitest.Reply{Text: "whole answer"})
	s := openSession(t, harness.SessionOptions{Provider: openAI(t, srv)})
	res, err := s.Run(context.Background(), "hi", nil)
	if err != nil || res.Text != "whole answer" {
		t.Fatalf("run after an error event: %+v, %v", res, err)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}

	srv.Push(openaitest.Reply{Chunks: []string{"half an "}, StreamError: "the model crashed"})
	_, err = s.Run(context.Background(), "again", nil)
	if err == nil || !strings.Contains(err.Error(), "midway") {
		t.Fatalf("run broken off by an error event: %v; want the user told it stopped midway", err)
	}
}

func TestAbortMidStreamKeepsHistoryValid(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(openaitest.Reply{Chunks: []string{"partial answer"}, Hang: true})
	st := openStore(t)
	opts := harness.SessionOptions{Key: "web:abort", Store: st, Provider: openAI(t, srv)}
	s := openSession(t, opts)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := s.Run(ctx, "tell me a story", func(u harness.Update) {
		if u.Kind == harness.UpdateDelta {
			cancel() // the user pressed /stop after the first words
		}
	})
	if err != nil {
		t.Fatalf("abort returned error %v", err)
	}
	if !res.Aborted || res.Text != "partial answer" {
		t.Fatalf("result = %+v", res)
	}
	if s.Steer("too late") { // Steer is refused once no run is in progress
		t.Fatal("still running after abort")
	}

	srv.Push(openaitest.Reply{Text: "fine"})
	res, err = s.Run(context.Background(), "go on", nil)
	if err != nil || res.Text != "fine" {
		t.Fatalf("next run: %+v, %v", res, err)
	}
	m := srv.Requests()[1].Messages
	if len(m) != 3 || m[1].Role != "assistant" || m[1].Content != "partial answer" || m[2].Content != "go on" {
		t.Fatalf("next request = %+v", m)
	}

	// On disk: the partial answer is marked aborted and every line is valid JSON.
	path, _ := st.Path(opts.Key)
	lines := readLines(t, path)
	var aborted int
	for _, l := range lines {
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("bad line %q: %v", l, err)
		}
		if e["aborted"] == true {
			aborted++
		}
	}
	if aborted != 1 {
		t.Fatalf("%d aborted entries, want 1:\n%s", aborted, strings.Join(lines, "\n"))
	}
	if s2 := openSession(t, opts); s2.Stats().Messages != 4 {
		t.Fatalf("reopened history has %d messages, want 4", s2.Stats().Messages)
	}
}

// blockingTool waits for its ctx, like a slow tool the user stops.
type blockingTool struct{ started chan struct{} }

func (b blockingTool) Def() llm.ToolDef {
	return llm.ToolDef{Name: "slow", Description: "takes long", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (b blockingTool) Run(ctx context.Context, _ json.RawMessage) (string, error) {
	close(b.started)
	<-ctx.Done()
	return "", ctx.Err()
}

func TestAbortDuringToolsAnswersEveryCall(t *testing.T) {
	fake := harness.NewFake(harness.FakeReply{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "slow"}, {ID: "c2", Name: "slow"}}})
	tool := blockingTool{started: make(chan struct{})}
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: fake, Tools: []harness.Tool{tool}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-tool.started
		cancel()
	}()
	res, err := s.Run(ctx, "do it", nil)
	if err != nil || !res.Aborted {
		t.Fatalf("run: %+v, %v", res, err)
	}
	if _, err := s.Run(context.Background(), "next", nil); err != nil {
		t.Fatal(err)
	}
	m := fake.Requests()[1].Messages
	// user, assistant(2 calls), tool c1, tool c2, user
	if len(m) != 5 || m[2].ToolCallID != "c1" || !m[2].IsError || m[3].ToolCallID != "c2" || !m[3].IsError || m[4].Content != "next" {
		t.Fatalf("history after abort = %+v", m)
	}
}

func TestSteerIsSeenByNextModelCall(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	fake := harness.NewFake()
	var calls int // only the run goroutine calls the func
	fake.SetFunc(func(*harness.Request) harness.FakeReply {
		calls++
		if calls == 1 {
			close(entered) // the model is thinking about the first task
			<-release
			return harness.FakeReply{Text: "working on it"}
		}
		return harness.FakeReply{Text: "done, with the extra"}
	})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: fake})
	if s.Steer("too early") {
		t.Fatal("Steer accepted while idle")
	}
	done := make(chan struct{})
	var res harness.Result
	var err error
	go func() {
		defer close(done)
		res, err = s.Run(context.Background(), "first task", nil)
	}()
	<-entered
	ok := s.Steer("also do this")
	close(release)
	<-done
	if !ok {
		t.Fatal("Steer refused during a run")
	}
	if err != nil || res.Text != "done, with the extra" {
		t.Fatalf("run: %+v, %v", res, err)
	}
	reqs := fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	m := reqs[1].Messages
	if last := m[len(m)-1]; last.Role != llm.RoleUser || last.Content != "also do this" {
		t.Fatalf("second call ends with %+v", last)
	}
	if m[len(m)-2].Content != "working on it" {
		t.Fatalf("second call lacks the first answer: %+v", m)
	}
	if s.Steer("late") {
		t.Fatal("Steer accepted after the run")
	}
}

func TestStoreRepairsTornLastLine(t *testing.T) {
	st := openStore(t)
	opts := harness.SessionOptions{Key: "telegram:42", Store: st, Provider: harness.NewFake()}
	s := openSession(t, opts)
	for _, p := range []string{"one", "two"} {
		if _, err := s.Run(context.Background(), p, nil); err != nil {
			t.Fatal(err)
		}
	}
	path, _ := st.Path(opts.Key)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"type":"message","id":"torn","parentId":"x","timestamp":"2024-01-01T00:00:00Z","message":{"role":"assi`)
	f.Close()

	s2 := openSession(t, opts) // a crash happened mid-write; loading repairs it
	if n := s2.Stats().Messages; n != 4 {
		t.Fatalf("%d messages after repair, want 4", n)
	}
	if _, err := s2.Run(context.Background(), "three", nil); err != nil {
		t.Fatal(err)
	}
	for _, l := range readLines(t, path) {
		if !json.Valid([]byte(l)) {
			t.Fatalf("invalid line left in the file: %q", l)
		}
	}
	if n := openSession(t, opts).Stats().Messages; n != 6 {
		t.Fatalf("%d messages, want 6", n)
	}
}

// One damaged line in the middle of a chat's history costs that entry only: the model
// still sees what came before and after it, the admin is told which file and line, and
// the line stays in the file.
func TestStoreSkipsADamagedLineAndKeepsTheRest(t *testing.T) {
	st := openStore(t)
	var logs logbuf.Buffer
	fake := harness.NewFake(harness.FakeReply{Text: "noted blue"}, harness.FakeReply{Text: "noted red"}, harness.FakeReply{Text: "blue and red"})
	opts := harness.SessionOptions{Key: "telegram:43", Store: st, Provider: fake, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	s := openSession(t, opts)
	for _, p := range []string{"my colour is blue", "my other colour is red"} {
		if _, err := s.Run(context.Background(), p, nil); err != nil {
			t.Fatal(err)
		}
	}
	path, _ := st.Path(opts.Key)
	lines := readLines(t, path)
	lines[2] = "\x00\x00 not JSON \x01" // the first answer
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	s2 := openSession(t, opts)
	if _, err := s2.Run(context.Background(), "what are my colours?", nil); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range fake.Requests()[2].Messages {
		got = append(got, m.Content)
	}
	if want := []string{"my colour is blue", "my other colour is red", "noted red", "what are my colours?"}; !slices.Equal(got, want) {
		t.Fatalf("the model was sent %q; want %q", got, want)
	}
	if l := logs.String(); !strings.Contains(l, "file="+path) || !strings.Contains(l, "lines=[3]") {
		t.Fatalf("the warning does not name the file and line:\n%s", l)
	}
	if l := readLines(t, path); l[2] != lines[2] || len(l) != 7 {
		t.Fatalf("the damaged line was not kept as it was, or the new turn is missing: %q", l)
	}

	// Loaded again (the chat was let go of while idle), the same damage is not warned of
	// again; new damage is.
	fake.Push(harness.FakeReply{Text: "ok"}, harness.FakeReply{Text: "ok"})
	if _, err := openSession(t, opts).Run(context.Background(), "thanks", nil); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "skipped lines"); n != 1 {
		t.Fatalf("the same damaged line was warned of %d times; want once:\n%s", n, logs.String())
	}
	more := readLines(t, path)
	more[4] = "\x00 more damage"
	if err := os.WriteFile(path, []byte(strings.Join(more, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openSession(t, opts).Run(context.Background(), "and now?", nil); err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); strings.Count(l, "skipped lines") != 2 || !strings.Contains(l, `lines="[3 5]"`) {
		t.Fatalf("new damage was not warned of, naming both lines:\n%s", l)
	}
}

// A history file of which not one line is an entry is not a crash's torn end: it is moved
// aside untouched (the log says where) and the chat starts afresh.
func TestStoreMovesAsideAFileThatIsNoHistory(t *testing.T) {
	st := openStore(t)
	var logs logbuf.Buffer
	fake := harness.NewFake(harness.FakeReply{Text: "hello"})
	opts := harness.SessionOptions{Key: "telegram:44", Store: st, Provider: fake, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	path, _ := st.Path(opts.Key)
	const junk = "PK\x03\x04 this is a zip, or someone's notes\nsecond line\n"
	if err := os.WriteFile(path, []byte(junk), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openSession(t, opts).Run(context.Background(), "hi", nil); err != nil {
		t.Fatal(err)
	}
	if m := fake.Requests()[0].Messages; len(m) != 1 || m[0].Content != "hi" {
		t.Fatalf("the model was sent %+v", m)
	}
	aside, _ := filepath.Glob(path + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("no copy kept beside %s: %v", path, aside)
	}
	if b, _ := os.ReadFile(aside[0]); string(b) != junk {
		t.Fatalf("the copy is %q, want the file as it was", b)
	}
	if !strings.Contains(logs.String(), "kept_as="+aside[0]) {
		t.Fatalf("the log does not say where the file went:\n%s", logs.String())
	}
	for _, l := range readLines(t, path) {
		if !json.Valid([]byte(l)) {
			t.Fatalf("the new history has an invalid line: %q", l)
		}
	}
}

// A damaged last line that is not the start of an entry (so no crash mid-write left it)
// is kept like any damaged line, and the next entry starts on a line of its own.
func TestStoreKeepsADamagedLastLineThatIsNoTear(t *testing.T) {
	for name, tail := range map[string]string{"ended": "garbage\n", "unended": "garbage"} {
		t.Run(name, func(t *testing.T) {
			st := openStore(t)
			opts := harness.SessionOptions{Key: "telegram:45", Store: st, Provider: harness.NewFake()}
			if _, err := openSession(t, opts).Run(context.Background(), "one", nil); err != nil {
				t.Fatal(err)
			}
			path, _ := st.Path(opts.Key)
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(tail)
			f.Close()
			s := openSession(t, opts)
			if n := s.Stats().Messages; n != 2 {
				t.Fatalf("%d messages, want 2", n)
			}
			if _, err := s.Run(context.Background(), "two", nil); err != nil {
				t.Fatal(err)
			}
			lines := readLines(t, path)
			if len(lines) != 6 || lines[3] != "garbage" {
				t.Fatalf("lines %q; want the damaged one kept as line 4, the new turn after it", lines)
			}
			if n := openSession(t, opts).Stats().Messages; n != 4 {
				t.Fatalf("%d messages, want 4", n)
			}
		})
	}
}

func TestReopenedSessionContinuesHistory(t *testing.T) {
	st := openStore(t)
	fake := harness.NewFake(harness.FakeReply{Text: "Hi Bob"}, harness.FakeReply{Text: "You are Bob"})
	opts := harness.SessionOptions{Key: "discord:7:99", Store: st, Provider: fake}
	if _, err := openSession(t, opts).Run(context.Background(), "I am Bob", nil); err != nil {
		t.Fatal(err)
	}
	s := openSession(t, opts) // e.g. after a restart
	if _, err := s.Run(context.Background(), "who am I?", nil); err != nil {
		t.Fatal(err)
	}
	m := fake.Requests()[1].Messages
	want := []string{"I am Bob", "Hi Bob", "who am I?"}
	if len(m) != 3 {
		t.Fatalf("sent %+v", m)
	}
	for i, w := range want {
		if m[i].Content != w {
			t.Fatalf("message %d = %q, want %q", i, m[i].Content, w)
		}
	}
}

func TestResetStartsFreshAndHookCanRefuse(t *testing.T) {
	bus := hooks.NewBus(hooks.Options{})
	refuse := true
	bus.On(hooks.NameSessionBeforeReset, "test", func(context.Context, hooks.Event) (any, error) {
		if refuse {
			return &hooks.CancelResult{Cancel: true, Reason: "archiving first"}, nil
		}
		return nil, nil
	})
	st := openStore(t)
	fake := harness.NewFake()
	opts := harness.SessionOptions{Key: "slack:C1:T1", Store: st, Provider: fake, Bus: bus}
	s := openSession(t, opts)
	if _, err := s.Run(context.Background(), "old topic", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(context.Background()); err == nil || !strings.Contains(err.Error(), "archiving first") {
		t.Fatalf("reset err = %v", err)
	}
	if s.Stats().Messages != 2 {
		t.Fatal("refused reset changed the history")
	}
	refuse = false
	if err := s.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().Messages; n != 0 {
		t.Fatalf("%d messages after reset", n)
	}
	if _, err := openSession(t, opts).Run(context.Background(), "new topic", nil); err != nil {
		t.Fatal(err)
	}
	reqs := fake.Requests()
	if m := reqs[len(reqs)-1].Messages; len(m) != 1 || m[0].Content != "new topic" {
		t.Fatalf("after reset sent %+v", m)
	}
}

func TestStoreFileNamesAreSafe(t *testing.T) {
	st := openStore(t)
	keys := []string{"telegram:123:7", "../../etc/passwd", `a\b/c`, ".hidden", "..", "a:b", "a_b", strings.Repeat("x", 500), "чат:1"}
	seen := map[string]string{}
	for _, k := range keys {
		name, err := harness.FileName(k)
		if err != nil {
			t.Fatalf("%q: %v", k, err)
		}
		if strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") || !filepath.IsLocal(name) || len(name) > 120 {
			t.Fatalf("%q → unsafe name %q", k, name)
		}
		if other, dup := seen[name]; dup {
			t.Fatalf("%q and %q share file %q", k, other, name)
		}
		seen[name] = k
		s := openSession(t, harness.SessionOptions{Key: k, Store: st, Provider: harness.NewFake()})
		if _, err := s.Run(context.Background(), "hi", nil); err != nil {
			t.Fatal(err)
		}
		p, _ := st.Path(k)
		if filepath.Dir(p) != st.Dir() {
			t.Fatalf("%q stored outside the store: %s", k, p)
		}
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%q: %v", k, err)
		}
	}
	if _, err := harness.FileName(""); err == nil {
		t.Fatal("empty key accepted")
	}
	entries, _ := os.ReadDir(st.Dir())
	if len(entries) != len(keys) {
		t.Fatalf("%d files for %d keys", len(entries), len(keys))
	}
}

func TestEchoSaysItIsEcho(t *testing.T) {
	p, err := harness.NewProvider(harness.Config{}, nil)
	if err != nil || p.Name() != "echo" {
		t.Fatalf("default provider = %v, %v", p, err)
	}
	s := openSession(t, harness.SessionOptions{Provider: p})
	res, err := s.Run(context.Background(), "hello there", nil)
	if err != nil {
		t.Fatal(err)
	}
	// It says so in plain words: which settings connect a model is the admin's log's to say.
	if !strings.Contains(res.Text, "No model is set up yet") || strings.Contains(res.Text, "llm.") ||
		strings.Contains(res.Text, "OPENAI_API_KEY") || !strings.HasSuffix(res.Text, "echo: hello there") {
		t.Fatalf("first answer = %q", res.Text)
	}
	res, _ = s.Run(context.Background(), "again", nil)
	if res.Text != "echo: again" {
		t.Fatalf("second answer = %q (the notice is said once)", res.Text)
	}
}

func TestNewProviderAndToolsNameUnknowns(t *testing.T) {
	if _, err := harness.NewProvider(harness.Config{Provider: "gemini"}, nil); err == nil || !strings.Contains(err.Error(), `"gemini"`) {
		t.Fatalf("err = %v", err)
	}
	if _, err := harness.BuiltinTools([]string{"current_time", "rm_rf"}); err == nil || !strings.Contains(err.Error(), `"rm_rf"`) {
		t.Fatalf("err = %v", err)
	}
	p, err := harness.NewProvider(harness.Config{Provider: "fake"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(*harness.Fake); !ok {
		t.Fatalf("fake provider is %T", p)
	}
	res, err := openSession(t, harness.SessionOptions{Provider: p}).Run(context.Background(), "ping", nil)
	if err != nil || res.Text != "ping" {
		t.Fatalf("fake echoes: %+v %v", res, err)
	}
}

func TestHooksSeeTheRunAndCanBlockTools(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(
		openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "c1", Name: "current_time"}}},
		openaitest.Reply{Text: "cannot tell"},
	)
	bus := hooks.NewBus(hooks.Options{})
	info := hooks.Session{Channel: "web", ChatID: "c-9", Profile: "p"}
	var mu sync.Mutex
	var names []string
	bus.Observe("test", func(_ context.Context, ev hooks.Event) {
		mu.Lock()
		defer mu.Unlock()
		names = append(names, ev.EventName())
		if si, ok := ev.(interface{ SessionInfo() *hooks.Session }); ok && si.SessionInfo().ChatID != "c-9" {
			t.Errorf("%s carries %+v", ev.EventName(), si.SessionInfo())
		}
	})
	bus.On(hooks.NameToolCall, "test", func(context.Context, hooks.Event) (any, error) {
		return &hooks.ToolCallResult{Block: true, Reason: "time is secret here"}, nil
	})
	bus.On(hooks.NameBeforeAgentStart, "test", func(context.Context, hooks.Event) (any, error) {
		sys := "You are a test."
		return &hooks.BeforeAgentStartResult{SystemPrompt: &sys}, nil
	})
	bus.On(hooks.NameBeforeProviderRequest, "test", func(_ context.Context, ev hooks.Event) (any, error) {
		o := ev.(*hooks.BeforeProviderRequest).Options
		o.Model = "hooked-model"
		return &hooks.ProviderRequestResult{Options: o}, nil
	})
	tools, _ := harness.BuiltinTools([]string{"current_time"})
	s := openSession(t, harness.SessionOptions{Provider: openAI(t, srv), Tools: tools, Bus: bus, Info: info})
	var u updates
	if _, err := s.Run(context.Background(), "time?", u.on); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if reqs[0].Model != "hooked-model" || reqs[0].Messages[0].Content != "You are a test." {
		t.Fatalf("hooks not applied: model %q first %+v", reqs[0].Model, reqs[0].Messages[0])
	}
	tm := reqs[1].Messages[len(reqs[1].Messages)-1]
	if tm.Role != "tool" || tm.Content != "time is secret here" {
		t.Fatalf("blocked tool result = %+v", tm)
	}
	if e := u.of(harness.UpdateToolEnd); len(e) != 1 || !e[0].IsError {
		t.Fatalf("tool end = %+v", e)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{hooks.NameBeforeAgentStart, hooks.NameAgentStart, hooks.NameContext, hooks.NameBeforeProviderRequest,
		hooks.NameTurnStart, hooks.NameBeforeProviderPayload, hooks.NameAfterProviderResponse, hooks.NameMessageEnd,
		hooks.NameToolCall, hooks.NameToolResult, hooks.NameTurnEnd}
	if !slices.Equal(names[:len(want)], want) {
		t.Fatalf("events = %v\nwant prefix %v", names, want)
	}
	if names[len(names)-1] != hooks.NameAgentEnd {
		t.Fatalf("last event %s", names[len(names)-1])
	}
}

// validToolTraffic reports what a real API refuses in a request: a tool message that does
// not answer a call of the assistant message before it, or a call left without its result.
func validToolTraffic(msgs []openaitest.Message) string {
	var open []string
	for i, m := range msgs {
		switch {
		case m.Role == "tool":
			if len(open) == 0 || open[0] != m.ToolCallID {
				return fmt.Sprintf("message %d: a tool result (%s) that answers no call before it", i, m.ToolCallID)
			}
			open = open[1:]
		case len(open) > 0:
			return fmt.Sprintf("message %d: calls %v left without results", i, open)
		case m.Role == "assistant":
			for _, tc := range m.ToolCalls {
				open = append(open, tc.ID)
			}
		}
	}
	if len(open) > 0 {
		return fmt.Sprintf("calls %v left without results", open)
	}
	return ""
}

// A context hook that keeps only the newest messages (a common way to save tokens) may cut
// between a tool call and its result: the model is still sent a valid conversation, and the
// user an answer. Before, the request held an orphan tool result, which real APIs refuse
// with a 400 that then came back at every message.
func TestContextHookCuttingToolTrafficStillAnswers(t *testing.T) {
	srv := newOpenAIServer(t)
	tools, err := harness.BuiltinTools([]string{"current_time"})
	if err != nil {
		t.Fatal(err)
	}
	bus := hooks.NewBus(hooks.Options{})
	bus.On(hooks.NameContext, "keep-last-3", func(_ context.Context, ev hooks.Event) (any, error) {
		msgs := ev.(*hooks.Context).Messages
		return &hooks.ContextResult{Messages: msgs[max(len(msgs)-3, 0):]}, nil
	})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv), Tools: tools, Bus: bus})
	srv.Push(openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "c1", Name: "current_time", Arguments: `{}`}}},
		openaitest.Reply{Text: "It is noon."}, openaitest.Reply{Text: "You are welcome."})
	for _, q := range []string{"What time is it?", "Thanks!"} {
		if _, err := s.Run(context.Background(), q, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range srv.Requests() {
		if bad := validToolTraffic(r.Messages); bad != "" {
			t.Errorf("request %d would be refused: %s", i, bad)
		}
	}
	reqs := srv.Requests()
	if m := reqs[len(reqs)-1].Messages; m[len(m)-1].Content != "Thanks!" {
		t.Fatalf("the last request ends with %+v", m[len(m)-1])
	}
}

func TestAnthropicStreamingWithToolCall(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	srv.Push(
		anthropictest.Reply{Chunks: []string{"Let me ", "check."}, ToolUses: []anthropictest.ToolUse{{ID: "toolu_1", Name: "current_time", Input: `{"timezone":"UTC"}`}}},
		anthropictest.Reply{Chunks: []string{"It is ", "now."}},
	)
	p, err := harness.NewProvider(harness.Config{Provider: "anthropic", Model: "claude-test", BaseURL: srv.URL(), APIKey: secret.Secret(testKey)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools, _ := harness.BuiltinTools([]string{"current_time"})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: p, Tools: tools, System: "sys"})
	var u updates
	res, err := s.Run(context.Background(), "time?", u.on)
	if err != nil {
		t.Fatal(err)
	}
	var deltas []string
	for _, d := range u.of(harness.UpdateDelta) {
		deltas = append(deltas, d.Text)
	}
	if !slices.Equal(deltas, []string{"Let me ", "check.", "It is ", "now."}) || res.Text != "It is now." {
		t.Fatalf("deltas %q, text %q", deltas, res.Text)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	r0 := reqs[0]
	if r0.Header.Get("X-Api-Key") != testKey || r0.System != "sys" || r0.Model != "claude-test" || !r0.Stream || r0.MaxTokens <= 0 ||
		!slices.Equal(r0.Tools, []string{"current_time"}) {
		t.Fatalf("first request = %+v", r0)
	}
	m := reqs[1].Messages
	if len(m) != 3 || m[1].Role != "assistant" || m[2].Role != "user" {
		t.Fatalf("second request = %+v", m)
	}
	var use, result *anthropictest.Block
	for i := range m[1].Blocks {
		if m[1].Blocks[i].Type == "tool_use" {
			use = &m[1].Blocks[i]
		}
	}
	for i := range m[2].Blocks {
		if m[2].Blocks[i].Type == "tool_result" {
			result = &m[2].Blocks[i]
		}
	}
	if use == nil || use.ID != "toolu_1" || use.Name != "current_time" || use.Input != `{"timezone":"UTC"}` {
		t.Fatalf("tool_use = %+v", use)
	}
	if result == nil || result.ToolUseID != "toolu_1" || result.IsError || !strings.Contains(result.Text, time.Now().UTC().Format("2006")) {
		t.Fatalf("tool_result = %+v", result)
	}
}

// Claude may say nothing but a line break before a tool call: that blank text is not sent
// back as a text block, which the API refuses ("must contain non-whitespace text") at this
// request and at every later one of the chat.
func TestAnthropicBlankTextBesideAToolCallIsNotSentBack(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	srv.Push(
		anthropictest.Reply{Chunks: []string{"\n\n"}, ToolUses: []anthropictest.ToolUse{{ID: "toolu_1", Name: "current_time", Input: `{}`}}},
		anthropictest.Reply{Text: "It is now."},
		anthropictest.Reply{Text: "Bye."},
	)
	p, err := harness.NewProvider(harness.Config{Provider: "anthropic", Model: "claude-test", BaseURL: srv.URL(), APIKey: secret.Secret(testKey)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools, _ := harness.BuiltinTools([]string{"current_time"})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: p, Tools: tools})
	if res, err := s.Run(context.Background(), "time?", nil); err != nil || res.Text != "It is now." {
		t.Fatalf("%q %v", res.Text, err)
	}
	if res, err := s.Run(context.Background(), "thanks", nil); err != nil || res.Text != "Bye." {
		t.Fatalf("the next message: %q %v", res.Text, err)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("%d requests; want 3", n)
	}
}

// An answer that reached the length limit, one the provider withheld and an empty one end
// with a note for the chat saying so, on both APIs; the history keeps the answer as the
// model gave it. Before, the chat showed a cut answer, or nothing, as if it were whole.
func TestAnswerEndingEarlyCarriesANote(t *testing.T) {
	oai := newOpenAIServer(t)
	ant := anthropictest.NewServer()
	t.Cleanup(ant.Close)
	claude, err := harness.NewProvider(harness.Config{Provider: "anthropic", Model: "claude-test", BaseURL: ant.URL(), APIKey: secret.Secret(testKey)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	oai.Push(openaitest.Reply{Text: "The list: 1, 2,", FinishReason: "length"}, openaitest.Reply{Text: "", FinishReason: "content_filter"},
		openaitest.Reply{Text: ""}, openaitest.Reply{Text: "3, 4."})
	ant.Push(anthropictest.Reply{Text: "The list: 1, 2,", StopReason: "max_tokens"}, anthropictest.Reply{Text: " ", StopReason: "refusal"},
		anthropictest.Reply{Text: ""}, anthropictest.Reply{Text: "3, 4."})
	for name, p := range map[string]harness.Provider{"openai": openAI(t, oai), "anthropic": claude} {
		s := openSession(t, harness.SessionOptions{Key: "web:" + name, Store: openStore(t), Provider: p})
		for _, c := range []struct {
			ask, text string
			ended     harness.Ending
		}{
			{"list them", "The list: 1, 2,", harness.EndedAtLength},
			{"and worse?", "", harness.EndedWithheld},
			{"hello?", "", harness.EndedEmpty},
			{"go on", "3, 4.", harness.EndedWhole},
		} {
			res, err := s.Run(context.Background(), c.ask, nil)
			if err != nil || strings.TrimSpace(res.Text) != c.text || res.Ended != c.ended {
				t.Fatalf("%s, %q: text %q, ended %d, %v; want ended %d", name, c.ask, res.Text, res.Ended, err, c.ended)
			}
		}
	}
	reqs := oai.Requests()
	if m := reqs[len(reqs)-1].Messages; m[1].Role != "assistant" || m[1].Content != "The list: 1, 2," {
		t.Fatalf("the history holds %+v", m[1])
	}
}

func TestAnthropicOverloadedRetried(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	srv.FailNext(1, fakeserver.Failure{Status: 529})
	p, _ := harness.NewProvider(harness.Config{Provider: "anthropic", Model: "claude-test", BaseURL: srv.URL(), APIKey: secret.Secret(testKey)}, nil)
	s := openSession(t, harness.SessionOptions{Provider: p})
	res, err := s.Run(context.Background(), "hi", nil)
	if err != nil || res.Text != "ok" || len(srv.Requests()) != 2 {
		t.Fatalf("run: %+v %v, %d requests", res, err, len(srv.Requests()))
	}
}

// What the Anthropic API says beside the answer is read as its SDK read it: the version
// header goes out, the token counts come back, an overloaded error event before any text
// is tried again (after some, the user is told the answer broke off), and a proxy's error
// page is classified by its status with its text kept.
func TestAnthropicStreamErrorsUsageAndErrorPages(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	p, err := harness.NewProvider(harness.Config{Provider: "anthropic", Model: "claude-test", BaseURL: srv.URL(), APIKey: secret.Secret(testKey)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var usage []llm.Usage
	s := openSession(t, harness.SessionOptions{Provider: p, OnUsage: func(_, _ string, u llm.Usage) { usage = append(usage, u) }})

	srv.Push(anthropictest.Reply{StreamError: "overloaded_error"}, anthropictest.Reply{Text: "whole answer"})
	res, err := s.Run(context.Background(), "hi", nil)
	if err != nil || res.Text != "whole answer" || len(srv.Requests()) != 2 {
		t.Fatalf("run after an overloaded event: %+v, %v, %d requests", res, err, len(srv.Requests()))
	}
	if v := srv.Requests()[0].Header.Get("anthropic-version"); v != "2023-06-01" {
		t.Fatalf("anthropic-version = %q", v)
	}
	if len(usage) == 0 || usage[len(usage)-1].InputTokens <= 0 || usage[len(usage)-1].OutputTokens != 5 {
		t.Fatalf("usage = %+v; want the stream's input tokens and 5 output tokens", usage)
	}

	srv.Push(anthropictest.Reply{Chunks: []string{"half an "}, StreamError: "api_error"})
	if _, err := s.Run(context.Background(), "again", nil); err == nil || !strings.Contains(err.Error(), "midway") {
		t.Fatalf("run broken off by an error event: %v; want the user told it stopped midway", err)
	}

	// A stream that ends cleanly before message_stop was cut: tried again before any
	// text, reported as broken off after some.
	n := len(srv.Requests())
	srv.Push(anthropictest.Reply{Truncated: true}, anthropictest.Reply{Text: "whole again"})
	if res, err := s.Run(context.Background(), "cut early", nil); err != nil || res.Text != "whole again" || len(srv.Requests())-n != 2 {
		t.Fatalf("run after a stream cut before any text: %+v, %v, %d requests; want the whole answer on the second", res, err, len(srv.Requests())-n)
	}
	srv.Push(anthropictest.Reply{Chunks: []string{"half ", "an answer"}, Truncated: true})
	if _, err := s.Run(context.Background(), "cut late", nil); err == nil || !strings.Contains(err.Error(), "midway") {
		t.Fatalf("run of a stream cut after some text: %v; want the user told it stopped midway", err)
	}

	n = len(srv.Requests())
	srv.Push(anthropictest.Reply{Status: 404, ErrorPage: "no route for /v1/messages on this proxy"})
	_, err = s.Run(context.Background(), "once more", nil)
	var pe *harness.ProviderError
	if !errors.As(err, &pe) || pe.Status != 404 || !strings.Contains(err.Error(), "no route for /v1/messages") {
		t.Fatalf("err after a 404 page = %v", err)
	}
	if got := len(srv.Requests()) - n; got != 1 {
		t.Fatalf("%d attempts after a 404 page, want 1", got)
	}
}

// A stream that ends cleanly but before the answer is closed ("[DONE]", a finish reason)
// was cut by the server or a proxy: before any text the call is made again; after some,
// the user is told the answer broke off, never handed the part as the whole answer.
func TestOpenAIStreamEndingBeforeItsEndIsACutAnswer(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(openaitest.Reply{Truncated: true}, openaitest.Reply{Text: "whole answer"})
	s := openSession(t, harness.SessionOptions{Provider: openAI(t, srv)})
	res, err := s.Run(context.Background(), "hi", nil)
	if err != nil || res.Text != "whole answer" {
		t.Fatalf("run after a stream cut before any text: %+v, %v", res, err)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}

	srv.Push(openaitest.Reply{Chunks: []string{"The ", "answer ", "is "}, Truncated: true})
	res, err = s.Run(context.Background(), "again", nil)
	if err == nil || !strings.Contains(err.Error(), "midway") {
		t.Fatalf("run of a stream cut after some text: %+v, %v; want the user told it stopped midway", res, err)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("%d attempts in all, want 3: text already shown is not asked for again", n)
	}
}

// A server that closes its answer with a finish reason but sends no "[DONE]" gave a whole
// answer: only a stream with neither is cut.
func TestOpenAIStreamWithAFinishReasonAndNoDoneIsWhole(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"all "}}]}`+"\n\n")
		fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"content":"of it"},"finish_reason":"stop"}]}`+"\n\n")
	}))
	t.Cleanup(srv.Close)
	p, err := harness.NewProvider(harness.Config{Provider: "openai", Model: "m", BaseURL: srv.URL + "/v1", APIKey: secret.Secret(testKey)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := openSession(t, harness.SessionOptions{Provider: p})
	res, err := s.Run(context.Background(), "hi", nil)
	if err != nil || res.Text != "all of it" || calls.Load() != 1 {
		t.Fatalf("run: %+v, %v after %d calls; want the whole answer from one call", res, err, calls.Load())
	}
}

func TestBrokenStreamIsNotRetriedAndKeepsWhatWasShown(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(openaitest.Reply{Chunks: []string{"half ", "of it"}, CutAfter: 1})
	s := openSession(t, harness.SessionOptions{Provider: openAI(t, srv)})
	res, err := s.Run(context.Background(), "hi", nil)
	if err == nil || !strings.Contains(err.Error(), "midway") {
		t.Fatalf("err = %v", err)
	}
	if res.Text != "half " || len(srv.Requests()) != 1 {
		t.Fatalf("result %+v after %d requests", res, len(srv.Requests()))
	}
	if _, err := s.Run(context.Background(), "again", nil); err != nil {
		t.Fatal(err)
	}
	m := srv.Requests()[1].Messages
	if len(m) != 3 || m[1].Content != "half " {
		t.Fatalf("history = %+v", m)
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func BenchmarkRunFake(b *testing.B) {
	st, err := harness.OpenStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	fake := harness.NewFake()
	fake.SetFunc(func(*harness.Request) harness.FakeReply {
		return harness.FakeReply{Chunks: []string{"a ", "short ", "answer"}}
	})
	s, err := harness.OpenSession(harness.SessionOptions{Key: "bench:1", Store: st, Provider: fake})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Run(ctx, "hello", nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRunFakeMemory(b *testing.B) {
	fake := harness.NewFake()
	fake.SetFunc(func(*harness.Request) harness.FakeReply {
		return harness.FakeReply{Chunks: []string{"a ", "short ", "answer"}}
	})
	s, err := harness.OpenSession(harness.SessionOptions{Key: "bench:1", Provider: fake})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Run(ctx, "hello", nil); err != nil {
			b.Fatal(err)
		}
	}
}

func TestPayloadHookReplacesTheBodySent(t *testing.T) {
	srv := newOpenAIServer(t)
	bus := hooks.NewBus(hooks.Options{})
	var status int
	bus.On(hooks.NameBeforeProviderPayload, "test", func(_ context.Context, ev hooks.Event) (any, error) {
		var body map[string]any
		if err := json.Unmarshal(ev.(*hooks.BeforeProviderPayload).Payload, &body); err != nil {
			return nil, err
		}
		body["user"] = "hook-was-here"
		b, _ := json.Marshal(body)
		return &hooks.ProviderPayloadResult{Payload: b}, nil
	})
	bus.On(hooks.NameAfterProviderResponse, "test", func(_ context.Context, ev hooks.Event) (any, error) {
		status = ev.(*hooks.AfterProviderResponse).Status
		return nil, nil
	})
	s := openSession(t, harness.SessionOptions{Provider: openAI(t, srv), Bus: bus})
	if _, err := s.Run(context.Background(), "hi", nil); err != nil {
		t.Fatal(err)
	}
	if body := string(srv.Requests()[0].Body); !strings.Contains(body, `"user":"hook-was-here"`) {
		t.Fatalf("body sent = %s", body)
	}
	if status != 200 {
		t.Fatalf("after_provider_response status = %d", status)
	}
}

func TestSlowProviderTimesOutAndIsRetried(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(openaitest.Reply{Text: "too late", Delay: time.Minute}, openaitest.Reply{Text: "in time"})
	s := openSession(t, harness.SessionOptions{Provider: openAI(t, srv), Timeout: time.Second})
	var u updates
	res, err := s.Run(context.Background(), "hi", u.on)
	if err != nil || res.Text != "in time" {
		t.Fatalf("run: %+v, %v", res, err)
	}
	if len(srv.Requests()) != 2 || len(u.of(harness.UpdateStatus)) != 1 {
		t.Fatalf("%d requests, %d status updates", len(srv.Requests()), len(u.of(harness.UpdateStatus)))
	}
}

// llm.timeout bounds the model's silence, not the answer's length: a slow model streaming
// for longer than it, a piece every 300 ms, is answered whole; one that falls silent midway
// for longer is cut there, and the chat is told. Before, the slow answer was cut at the
// timeout and the user read that the model stopped answering midway.
func TestSlowStreamIsNotCutWhileItFlows(t *testing.T) {
	srv := newOpenAIServer(t)
	chunks := []string{"one ", "two ", "three ", "four ", "five ", "six ", "seven"}
	srv.Push(openaitest.Reply{Chunks: chunks, ChunkDelay: 300 * time.Millisecond},
		openaitest.Reply{Chunks: []string{"half ", "an answer"}, Hang: true})
	s := openSession(t, harness.SessionOptions{Provider: openAI(t, srv), Timeout: time.Second})
	start := time.Now()
	res, err := s.Run(context.Background(), "count slowly", nil)
	if err != nil || res.Text != strings.Join(chunks, "") {
		t.Fatalf("run: %q, %v", res.Text, err)
	}
	if took := time.Since(start); took < 1500*time.Millisecond {
		t.Fatalf("the answer took %v; the test needs it longer than the timeout", took)
	}
	res, err = s.Run(context.Background(), "and now?", nil)
	if err == nil || !strings.Contains(err.Error(), "midway") || res.Text != "half an answer" {
		t.Fatalf("a silent model: %q, %v", res.Text, err)
	}
}

// badTool fails in the two ways a tool can: an error, or a panic.
type badTool struct{ panics bool }

func (b badTool) Def() llm.ToolDef {
	name := "fails"
	if b.panics {
		name = "panics"
	}
	return llm.ToolDef{Name: name, Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (b badTool) Run(context.Context, json.RawMessage) (string, error) {
	if b.panics {
		panic("boom")
	}
	return "", errors.New("disk on fire")
}

func TestToolFailuresBecomeErrorResults(t *testing.T) {
	fake := harness.NewFake(
		harness.FakeReply{ToolCalls: []llm.ToolCall{{Name: "fails"}, {Name: "panics"}, {Name: "missing"}}},
		harness.FakeReply{Text: "sorry"},
	)
	s := openSession(t, harness.SessionOptions{Provider: fake, Tools: []harness.Tool{badTool{}, badTool{panics: true}}})
	res, err := s.Run(context.Background(), "go", nil)
	if err != nil || res.Text != "sorry" {
		t.Fatalf("run: %+v, %v", res, err)
	}
	m := fake.Requests()[1].Messages
	want := []string{"disk on fire", "crashed", `no tool named "missing"`}
	for i, w := range want {
		r := m[2+i]
		if r.Role != llm.RoleTool || !r.IsError || !strings.Contains(r.Content, w) {
			t.Fatalf("result %d = %+v, want error containing %q", i, r, w)
		}
	}
}

// A base URL may carry a password or a key in its query; a failed call's error quotes its
// URL. Neither the user nor the log sees them.
func TestSecretsInTheBaseURLStayOutOfErrorsAndLogs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the call fails with an error that quotes the URL
	for _, provider := range []string{"openai", "anthropic"} {
		t.Run(provider, func(t *testing.T) {
			base := "http://proxy:pass-in-url@" + addr + "/v1?key=key-in-query"
			p, err := harness.NewProvider(harness.Config{Provider: provider, Model: "m", BaseURL: base, APIKey: secret.Secret(testKey)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var log strings.Builder
			s := openSession(t, harness.SessionOptions{Provider: p, MaxRetries: -1, Logger: slog.New(slog.NewTextHandler(&log, nil))})
			_, err = s.Run(context.Background(), "hi", nil)
			var pe *harness.ProviderError
			if !errors.As(err, &pe) || !pe.Unreachable {
				t.Fatalf("err = %v; want the model unreachable", err)
			}
			for _, text := range []string{err.Error(), pe.Err.Error(), log.String()} {
				if strings.Contains(text, "pass-in-url") || strings.Contains(text, "key-in-query") {
					t.Fatalf("a secret of the base URL shows: %q", text)
				}
			}
			if !strings.Contains(log.String(), addr) {
				t.Fatalf("the log does not name the failed call: %s", log.String())
			}
		})
	}
}

func TestOpenAICompatibleLocalServerNeedsNoKey(t *testing.T) {
	srv := newOpenAIServer(t)
	// Like Ollama or llama.cpp: a base_url of its own and no API key.
	p, err := harness.NewProvider(harness.Config{Provider: "openai", Model: "llama3", BaseURL: srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := openSession(t, harness.SessionOptions{Provider: p}).Run(context.Background(), "hi", nil)
	if err != nil || res.Text != "ok" {
		t.Fatalf("run: %+v, %v", res, err)
	}
	r := srv.Requests()[0]
	if r.Path != "/chat/completions" || r.Header.Get("Authorization") != "" {
		t.Fatalf("path %q, Authorization %q", r.Path, r.Header.Get("Authorization"))
	}
}

// argsTool records the arguments it is run with.
type argsTool struct{ got chan json.RawMessage }

func (a argsTool) Def() llm.ToolDef {
	return llm.ToolDef{Name: "lookup_order", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (a argsTool) Run(_ context.Context, args json.RawMessage) (string, error) {
	a.got <- args
	return "order found", nil
}

// A model whose tool call's arguments are not JSON (cut off, or malformed) is told so and
// may call again; the tool is not run with {} in their place, as if the model had asked that.
func TestToolCallWithArgumentsThatAreNotJSONIsToldNotRun(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(
		openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "call_bad", Name: "lookup_order", Arguments: `{"id": "A-1`}}},
		openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "call_ok", Name: "lookup_order", Arguments: `{"id": "A-17"}`}}},
		openaitest.Reply{Text: "Shipped."},
	)
	tool := argsTool{got: make(chan json.RawMessage, 2)}
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv), Tools: []harness.Tool{tool}})
	res, err := s.Run(context.Background(), "where is my order?", nil)
	if err != nil || res.Text != "Shipped." {
		t.Fatalf("run: %+v, %v", res, err)
	}
	if len(tool.got) != 1 {
		t.Fatalf("the tool ran %d times, want once (with the good arguments)", len(tool.got))
	}
	if got := string(<-tool.got); got != `{"id": "A-17"}` {
		t.Fatalf("the tool ran with %s", got)
	}
	m := srv.Requests()[1].Messages
	r := m[len(m)-1]
	if r.Role != "tool" || r.ToolCallID != "call_bad" || !strings.Contains(r.Content, "not valid JSON") {
		t.Fatalf("the model was told %+v, want that its arguments were not valid JSON", r)
	}
}
