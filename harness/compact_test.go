package harness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/harness"
	"gateway/harness/anthropictest"
	"gateway/harness/openaitest"
	"gateway/hooks"
	"gateway/internal/llm"
	"gateway/internal/secret"
)

// isSummaryRequest tells the summariser's requests from the chat's.
func isSummaryRequest(msgs []openaitest.Message) bool {
	return len(msgs) > 0 && msgs[0].Role == "system" && strings.Contains(msgs[0].Content, "You write summaries")
}

// summariser answers the summary requests with a short numbered summary and everything
// else with a reply that names the prompt.
func summariser(srv *openaitest.Server) {
	n := 0
	var mu sync.Mutex
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		if isSummaryRequest(r.Messages) {
			mu.Lock()
			n++
			k := n
			mu.Unlock()
			return openaitest.Reply{Text: fmt.Sprintf("SUMMARY-%d: the user counted messages.", k)}
		}
		// The prompt is the last paragraph: consecutive user messages (a summary and the
		// prompt) arrive as one.
		last := r.Messages[len(r.Messages)-1].Content
		if i := strings.LastIndex(last, "\n\n"); i >= 0 {
			last = last[i+2:]
		}
		return openaitest.Reply{Text: "answer to " + last[:min(len(last), 12)] + strings.Repeat(" filler", 20)}
	})
}

// ageFile rewrites every timestamp of a history file to stamp.
func ageFile(t *testing.T, path, stamp string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`"timestamp":"[^"]*"`).ReplaceAll(b, []byte(`"timestamp":"`+stamp+`"`))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

type compactLog struct {
	mu     sync.Mutex
	before []*hooks.SessionBeforeCompact
	after  []*hooks.SessionCompact
}

func (c *compactLog) watch(bus *hooks.Bus) {
	bus.Observe("test", func(_ context.Context, ev hooks.Event) {
		c.mu.Lock()
		defer c.mu.Unlock()
		switch e := ev.(type) {
		case *hooks.SessionBeforeCompact:
			c.before = append(c.before, e)
		case *hooks.SessionCompact:
			c.after = append(c.after, e)
		}
	})
}

func compactionLines(t *testing.T, st *harness.Store, key string) []map[string]any {
	t.Helper()
	p, err := st.Path(key)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range readLines(t, p) {
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("bad line %q", l)
		}
		if e["type"] == "compaction" {
			out = append(out, e)
		}
	}
	return out
}

// A model that answers 400 context_length_exceeded above its window: 150 messages of one
// chat are all answered, the history holds compaction entries in the pi form, every request
// carries the newest message, and the summary survives a restart.
func TestLongChatIsCompactedAndEveryMessageAnswered(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.LimitContext(3000)
	summariser(srv)
	st := openStore(t)
	bus := hooks.NewBus(hooks.Options{})
	var log compactLog
	log.watch(bus)
	opts := harness.SessionOptions{Key: "telegram:150", Store: st, Provider: openAI(t, srv), Model: "gpt-test",
		ContextWindow: 3000, Bus: bus, System: "You are a counter."}
	s := openSession(t, opts)
	for i := range 150 {
		prompt := fmt.Sprintf("message %03d %s", i, strings.Repeat("words ", 40))
		res, err := s.Run(context.Background(), prompt, nil)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !strings.HasPrefix(res.Text, "answer to "+prompt[:12]) {
			t.Fatalf("message %d answered %q", i, res.Text)
		}
		reqs := srv.Requests()
		last := reqs[len(reqs)-1]
		if got := last.Messages[len(last.Messages)-1].Content; got != prompt {
			t.Fatalf("message %d: the request ends with %q", i, got[:min(len(got), 30)])
		}
	}
	lines := compactionLines(t, st, opts.Key)
	if len(lines) < 3 {
		t.Fatalf("%d compaction entries", len(lines))
	}
	for _, c := range lines {
		for _, k := range []string{"id", "parentId", "timestamp", "summary", "firstKeptEntryId", "tokensBefore"} {
			if _, ok := c[k]; !ok {
				t.Fatalf("compaction entry lacks %s: %v", k, c)
			}
		}
		if c["tokensBefore"].(float64) <= 0 || !strings.HasPrefix(c["summary"].(string), "SUMMARY-") {
			t.Fatalf("compaction entry %v", c)
		}
	}
	log.mu.Lock()
	if len(log.before) < len(lines) || len(log.after) != len(lines) {
		t.Errorf("events: %d before, %d after, %d entries", len(log.before), len(log.after), len(lines))
	}
	log.mu.Unlock()
	// No chat request above the window went unanswered: each failure was followed by a retry.
	reqs := srv.Requests()
	for i, r := range reqs {
		if openaitest.Tokens(r.Body) > 3000 && (i+1 >= len(reqs)) {
			t.Fatalf("request %d over the window was the last one", i)
		}
	}
	st1 := s.Stats()
	if st1.LastCompaction.IsZero() || st1.ContextWindow != 3000 || st1.ContextTokens <= 0 || st1.ContextTokens > 3000 {
		t.Fatalf("stats %+v", st1)
	}

	// After a restart the latest summary is the first thing the model reads.
	latest := lines[len(lines)-1]["summary"].(string)
	s2 := openSession(t, opts)
	if got := s2.Stats(); got.LastCompaction.IsZero() || got.LastCompactionTokens == 0 {
		t.Fatalf("the last compaction was not loaded: %+v", got)
	}
	if _, err := s2.Run(context.Background(), "what did we talk about?", nil); err != nil {
		t.Fatal(err)
	}
	reqs = srv.Requests()
	var chat openaitest.Request
	for i := len(reqs) - 1; i >= 0; i-- {
		if !isSummaryRequest(reqs[i].Messages) {
			chat = reqs[i]
			break
		}
	}
	if len(chat.Messages) < 3 || chat.Messages[1].Role != "user" || !strings.Contains(chat.Messages[1].Content, latest) {
		t.Fatalf("after restart the request starts %+v", chat.Messages[:min(2, len(chat.Messages))])
	}
	if chat.Messages[len(chat.Messages)-1].Content != "what did we talk about?" {
		t.Fatal("the newest message is missing")
	}
}

// The provider says the context is too long although our estimate said it fit: one
// compaction, one retry, and the answer arrives.
func TestOverflowAnswerCompactsAndRetriesOnce(t *testing.T) {
	srv := newOpenAIServer(t)
	summariser(srv)
	st := openStore(t)
	bus := hooks.NewBus(hooks.Options{})
	var log compactLog
	log.watch(bus)
	// We believe the window is large; the server's is small.
	opts := harness.SessionOptions{Key: "web:of", Store: st, Provider: openAI(t, srv), Model: "gpt-test", ContextWindow: 100_000, Bus: bus}
	s := openSession(t, opts)
	for i := range 12 {
		if _, err := s.Run(context.Background(), fmt.Sprintf("note %d %s", i, strings.Repeat("x", 400)), nil); err != nil {
			t.Fatal(err)
		}
	}
	before := len(srv.Requests())
	limit := openaitest.Tokens(srv.Requests()[before-1].Body) * 2 / 3
	srv.LimitContext(limit)
	res, err := s.Run(context.Background(), "and now?", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Text, "answer to and now?") {
		t.Fatalf("answer %q", res.Text)
	}
	reqs := srv.Requests()[before:]
	// the failed attempt, the summary, the retry: more than one attempt at the answer
	var chat []int
	for _, r := range reqs {
		if !isSummaryRequest(r.Messages) {
			chat = append(chat, openaitest.Tokens(r.Body))
		}
	}
	if len(chat) != 2 || chat[0] <= limit || chat[1] > limit || len(reqs) != 3 || !isSummaryRequest(reqs[1].Messages) {
		t.Fatalf("chat requests of %v tokens (limit %d), %d requests in all", chat, limit, len(reqs))
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.after) != 1 || log.after[0].Reason != hooks.CompactOverflow {
		t.Fatalf("compactions %+v", log.after)
	}
}

// When the retry after a compaction still fails with only the user's message in it, the
// user is told in plain words that the message itself is too long (not to send /new, which
// cannot help it), and the chat's next message is answered; /new works too.
func TestOverflowThatPersistsIsToldAndNewHelps(t *testing.T) {
	srv := newOpenAIServer(t)
	summariser(srv)
	s := openSession(t, harness.SessionOptions{Key: "web:big", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test", ContextWindow: 100_000})
	srv.LimitContext(1500)
	huge := strings.Repeat("y", 20_000) // one message larger than the model's window
	_, err := s.Run(context.Background(), huge, nil)
	if err == nil || !strings.Contains(err.Error(), "Your message is too long") || strings.Contains(err.Error(), "/new") {
		t.Fatalf("err = %v", err)
	}
	if n := len(srv.Requests()); n < 2 {
		t.Fatalf("%d attempts; want the request retried once", n)
	}
	if res, err := s.Run(context.Background(), "a short one", nil); err != nil || !strings.HasPrefix(res.Text, "answer to a short one") {
		t.Fatalf("the next message: %q, %v", res.Text, err)
	}
	if err := s.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Run(context.Background(), "hello again", nil); err != nil || !strings.HasPrefix(res.Text, "answer to hello again") {
		t.Fatalf("after /new: %q, %v", res.Text, err)
	}
}

// A hook cancelling session_before_compact: the chat still works, the oldest turns are
// left out of the request instead, and no compaction entry is written.
func TestHookCancellingCompactionStillAnswers(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.LimitContext(2500)
	summariser(srv)
	bus := hooks.NewBus(hooks.Options{})
	var cancels int
	var mu sync.Mutex
	bus.On(hooks.NameSessionBeforeCompact, "keep-all", func(context.Context, hooks.Event) (any, error) {
		mu.Lock()
		cancels++
		mu.Unlock()
		return &hooks.CompactResult{Cancel: true, Reason: "audit"}, nil
	})
	st := openStore(t)
	opts := harness.SessionOptions{Key: "slack:keep", Store: st, Provider: openAI(t, srv), Model: "gpt-test", ContextWindow: 2500, Bus: bus}
	s := openSession(t, opts)
	for i := range 40 {
		prompt := fmt.Sprintf("turn %d %s", i, strings.Repeat("z", 300))
		if _, err := s.Run(context.Background(), prompt, nil); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		reqs := srv.Requests()
		if got := reqs[len(reqs)-1].Messages; got[len(got)-1].Content != prompt {
			t.Fatalf("turn %d: newest message missing", i)
		}
	}
	if cancels == 0 {
		t.Fatal("session_before_compact never ran")
	}
	if n := len(compactionLines(t, st, opts.Key)); n != 0 {
		t.Fatalf("%d compaction entries despite the cancel", n)
	}
	for _, r := range srv.Requests() {
		if isSummaryRequest(r.Messages) {
			t.Fatal("the model was asked for a summary despite the cancel")
		}
	}
	if s.Stats().Messages != 80 {
		t.Fatalf("history holds %d messages", s.Stats().Messages)
	}
}

// A summary the provider fails to write is asked for once per message, not twice (before
// the message joins the history, then again before its call): the user, whose message is
// answered with the oldest turns left out, does not wait for a failing provider twice.
func TestFailingSummaryIsAskedOncePerMessage(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		if isSummaryRequest(r.Messages) {
			return openaitest.Reply{Status: 500}
		}
		return openaitest.Reply{Text: "noted " + strings.Repeat("ok ", 20)}
	})
	s := openSession(t, harness.SessionOptions{Key: "web:nosum", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test",
		ContextWindow: 2500, MaxRetries: -1})
	total := 0
	for i := range 12 {
		before := len(srv.Requests())
		if _, err := s.Run(context.Background(), fmt.Sprintf("turn %d %s", i, strings.Repeat("z", 1200)), nil); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		asked := 0
		for _, r := range srv.Requests()[before:] {
			if isSummaryRequest(r.Messages) {
				asked++
			}
		}
		if asked > 1 {
			t.Fatalf("turn %d asked for a summary %d times", i, asked)
		}
		total += asked
	}
	if total == 0 {
		t.Fatal("no summary was ever asked for: the test did not reach the threshold")
	}
}

// A hook handing its own summary: that summary is saved and sent, the model is not asked.
func TestHookSuppliedSummaryIsUsed(t *testing.T) {
	srv := newOpenAIServer(t)
	summariser(srv)
	bus := hooks.NewBus(hooks.Options{})
	var seen *hooks.SessionBeforeCompact
	bus.On(hooks.NameSessionBeforeCompact, "mine", func(_ context.Context, ev hooks.Event) (any, error) {
		if seen == nil {
			seen = ev.(*hooks.SessionBeforeCompact)
		}
		return &hooks.CompactResult{Summary: "HOOK SUMMARY: Ann likes trains."}, nil
	})
	st := openStore(t)
	opts := harness.SessionOptions{Key: "tg:hook", Store: st, Provider: openAI(t, srv), Model: "gpt-test", ContextWindow: 2000, Bus: bus}
	s := openSession(t, opts)
	for i := range 25 {
		if _, err := s.Run(context.Background(), fmt.Sprintf("fact %d %s", i, strings.Repeat("q", 300)), nil); err != nil {
			t.Fatal(err)
		}
	}
	lines := compactionLines(t, st, opts.Key)
	if len(lines) == 0 || lines[0]["summary"] != "HOOK SUMMARY: Ann likes trains." || lines[0]["fromHook"] != true {
		t.Fatalf("compaction entries %v", lines)
	}
	if seen == nil || seen.Entries == 0 || len(seen.Messages) != seen.Entries || seen.Messages[0].Content[:6] != "fact 0" || seen.Reason != hooks.CompactThreshold {
		t.Fatalf("event %+v", seen)
	}
	for _, r := range srv.Requests() {
		if isSummaryRequest(r.Messages) {
			t.Fatal("the model was asked for a summary although a hook gave one")
		}
	}
	reqs := srv.Requests()
	if m := reqs[len(reqs)-1].Messages; !strings.Contains(m[0].Content, "HOOK SUMMARY") {
		t.Fatalf("the request does not start with the hook's summary: %+v", m[0])
	}
}

// Compact on demand: instructions reach the summariser; a short chat says there is nothing
// to compact.
func TestCompactOnDemand(t *testing.T) {
	srv := newOpenAIServer(t)
	summariser(srv)
	st := openStore(t)
	s := openSession(t, harness.SessionOptions{Key: "web:manual", Store: st, Provider: openAI(t, srv), Model: "gpt-4o"})
	if _, err := s.Compact(context.Background(), ""); err != harness.ErrNothingToCompact {
		t.Fatalf("empty chat: %v", err)
	}
	for _, p := range []string{"I am Ann", "I live in Rome", "what is my name?"} {
		if _, err := s.Run(context.Background(), p, nil); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Compact(context.Background(), "keep the city")
	if err != nil {
		t.Fatal(err)
	}
	if res.Summarised != 4 || res.TokensBefore <= 0 || res.FromHook {
		t.Fatalf("result %+v", res)
	}
	reqs := srv.Requests()
	sum := reqs[len(reqs)-1]
	if !isSummaryRequest(sum.Messages) || !strings.Contains(sum.Messages[1].Content, "keep the city") ||
		!strings.Contains(sum.Messages[1].Content, "[User]: I live in Rome") || strings.Contains(sum.Messages[1].Content, "what is my name") {
		t.Fatalf("summary request %+v", sum.Messages)
	}
	if _, err := s.Run(context.Background(), "and now?", nil); err != nil {
		t.Fatal(err)
	}
	reqs = srv.Requests()
	m := reqs[len(reqs)-1].Messages
	// the summary with the kept exchange's question (one user message), its answer, the
	// new prompt (no system prompt is set)
	if len(m) != 3 || !strings.Contains(m[0].Content, "SUMMARY-1") || !strings.HasSuffix(m[0].Content, "\n\nwhat is my name?") || m[2].Content != "and now?" {
		t.Fatalf("after /compact sent %+v", m)
	}
}

// The cut of a compaction never separates a tool call from its results: with long tool
// chains in every turn, every request the model gets is a valid conversation.
func TestCompactionKeepsToolCallsWithTheirResults(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.LimitContext(3000)
	var mu sync.Mutex
	calls := 0
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		if isSummaryRequest(r.Messages) {
			return openaitest.Reply{Text: "SUMMARY: tools were used."}
		}
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls%4 != 0 {
			return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: fmt.Sprintf("call_%d", calls), Name: "lookup", Arguments: `{"q":"` + strings.Repeat("a", 100) + `"}`}}}
		}
		return openaitest.Reply{Text: "done"}
	})
	tool := lookupTool{}
	s := openSession(t, harness.SessionOptions{Key: "web:tools", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test",
		ContextWindow: 3000, Tools: []harness.Tool{tool}})
	for i := range 25 {
		if _, err := s.Run(context.Background(), fmt.Sprintf("task %d", i), nil); err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
	}
	summaries := 0
	for n, r := range srv.Requests() {
		if isSummaryRequest(r.Messages) {
			summaries++
			continue
		}
		open := map[string]bool{}
		for i, m := range r.Messages {
			switch {
			case m.Role == "tool":
				if !open[m.ToolCallID] {
					t.Fatalf("request %d message %d: result %s without its call", n, i, m.ToolCallID)
				}
				delete(open, m.ToolCallID)
			case len(m.ToolCalls) > 0:
				if len(open) > 0 {
					t.Fatalf("request %d: calls %v left without results", n, open)
				}
				for _, c := range m.ToolCalls {
					open[c.ID] = true
				}
			}
		}
	}
	if summaries == 0 {
		t.Fatal("no compaction happened")
	}
}

type lookupTool struct{}

func (lookupTool) Def() llm.ToolDef {
	return llm.ToolDef{Name: "lookup", Description: "looks up", Parameters: json.RawMessage(`{"type":"object"}`)}
}
func (lookupTool) Run(context.Context, json.RawMessage) (string, error) {
	return strings.Repeat("result ", 30), nil
}

// pageTool returns a long web page, as an MCP fetch tool does.
type pageTool struct{}

func (pageTool) Def() llm.ToolDef {
	return llm.ToolDef{Name: "fetch_page", Description: "Fetch a web page", Parameters: json.RawMessage(`{"type":"object"}`)}
}
func (pageTool) Run(context.Context, json.RawMessage) (string, error) {
	return strings.Repeat("<p>a paragraph of the page</p>\n", 2000), nil
}

// A tool whose output is far larger than a small model's window (60 KB for 8192 tokens, as
// the server counts too) reaches the model cut to fit, marked as cut, and the user gets an
// answer. Before, the request was refused as too long, and the user was told to send /new.
func TestLongToolOutputIsCutToTheModelsWindow(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.LimitContext(8192)
	srv.Push(openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "f1", Name: "fetch_page", Arguments: `{}`}}},
		openaitest.Reply{Text: "The page is about paragraphs."})
	s := openSession(t, harness.SessionOptions{Key: "web:page", Store: openStore(t), Provider: openAI(t, srv), Model: "llama3",
		ContextWindow: 8192, Tools: []harness.Tool{pageTool{}}})
	res, err := s.Run(context.Background(), "What is on the page?", nil)
	if err != nil || res.Text != "The page is about paragraphs." {
		t.Fatalf("%q %v", res.Text, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests; want the call and the answer", len(reqs))
	}
	m := reqs[1].Messages
	got := m[len(m)-1]
	if got.Role != "tool" || !strings.HasPrefix(got.Content, "<p>a paragraph of the page</p>") || !strings.Contains(got.Content, "[the rest of the tool's output is cut") {
		t.Fatalf("tool result %q … %q", got.Content[:min(len(got.Content), 40)], got.Content[max(len(got.Content)-120, 0):])
	}
}

// Anthropic's wording ("prompt is too long") is recognised as well.
func TestAnthropicPromptTooLongCompactsAndRetries(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	srv.SetFunc(func(r anthropictest.Request) anthropictest.Reply {
		if strings.Contains(r.System, "You write summaries") {
			return anthropictest.Reply{Text: "SUMMARY: earlier talk."}
		}
		return anthropictest.Reply{Text: "fine"}
	})
	p, err := harness.NewProvider(harness.Config{Provider: "anthropic", Model: "claude-test", BaseURL: srv.URL(), APIKey: secret.Secret(testKey)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := openSession(t, harness.SessionOptions{Key: "web:claude", Store: openStore(t), Provider: p, Model: "claude-test"})
	for i := range 10 {
		if _, err := s.Run(context.Background(), fmt.Sprintf("n %d %s", i, strings.Repeat("w", 500)), nil); err != nil {
			t.Fatal(err)
		}
	}
	before := len(srv.Requests())
	limit := anthropictest.Tokens(srv.Requests()[before-1].Body) * 2 / 3
	srv.LimitContext(limit)
	if res, err := s.Run(context.Background(), "still there?", nil); err != nil || res.Text != "fine" {
		t.Fatalf("%q %v", res.Text, err)
	}
	var chat []int
	for _, r := range srv.Requests()[before:] {
		if !strings.Contains(r.System, "You write summaries") {
			chat = append(chat, anthropictest.Tokens(r.Body))
		}
	}
	// the failed attempt and the retry, a summary between them
	if len(chat) != 2 || chat[0] <= limit || chat[1] > limit || len(srv.Requests())-before != 3 {
		t.Fatalf("chat requests of %v tokens (limit %d), %d requests in all", chat, limit, len(srv.Requests())-before)
	}
}

// Anthropic's other wording, for a prompt that fits but leaves no room for max_tokens
// ("input length and `max_tokens` exceed context limit"), compacts and retries too; before,
// the user was shown the API's words and every later message failed alike.
func TestAnthropicNoRoomForMaxTokensCompactsAndRetries(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	full := false
	srv.SetFunc(func(r anthropictest.Request) anthropictest.Reply {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.Contains(r.System, "You write summaries"):
			full = false
			return anthropictest.Reply{Text: "SUMMARY: earlier talk."}
		case full:
			return anthropictest.Reply{Status: 400, Message: "input length and `max_tokens` exceed context limit: 196112 + 8192 > 200000, decrease input length or `max_tokens` and try again"}
		}
		return anthropictest.Reply{Text: "fine"}
	})
	p, err := harness.NewProvider(harness.Config{Provider: "anthropic", Model: "claude-test", BaseURL: srv.URL(), APIKey: secret.Secret(testKey)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := openSession(t, harness.SessionOptions{Key: "web:claude-full", Store: openStore(t), Provider: p, Model: "claude-test", MaxRetries: 2})
	for i := range 6 {
		if _, err := s.Run(context.Background(), fmt.Sprintf("n %d %s", i, strings.Repeat("w", 500)), nil); err != nil {
			t.Fatal(err)
		}
	}
	before := len(srv.Requests())
	mu.Lock()
	full = true
	mu.Unlock()
	if res, err := s.Run(context.Background(), "still there?", nil); err != nil || res.Text != "fine" {
		t.Fatalf("%q %v", res.Text, err)
	}
	// the refused attempt, the summary, the retry
	if n := len(srv.Requests()) - before; n != 3 {
		t.Fatalf("%d requests; want the refused one, a summary and one retry", n)
	}
}

// idle_reset: a chat silent longer than the limit starts a fresh history.
func TestIdleResetStartsAFreshHistory(t *testing.T) {
	fake := harness.NewFake()
	st := openStore(t)
	opts := harness.SessionOptions{Key: "tg:idle", Store: st, Provider: fake, IdleReset: time.Hour}
	s := openSession(t, opts)
	if _, err := s.Run(context.Background(), "old topic", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(context.Background(), "still the old topic", nil); err != nil {
		t.Fatal(err)
	}
	if m := fake.Requests()[1].Messages; len(m) != 3 {
		t.Fatalf("within idle_reset the history was not kept: %+v", m)
	}
	// Rewrite the file's timestamps as if the chat had been silent for two hours.
	p, _ := st.Path(opts.Key)
	old := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)
	ageFile(t, p, old)
	s = openSession(t, opts) // the idle chat's session was evicted meanwhile
	if _, err := s.Run(context.Background(), "new topic", nil); err != nil {
		t.Fatal(err)
	}
	reqs := fake.Requests()
	if m := reqs[len(reqs)-1].Messages; len(m) != 1 || m[0].Content != "new topic" {
		t.Fatalf("after idle_reset sent %+v", m)
	}
	// Without idle_reset the same file keeps its history.
	ageFile(t, p, old)
	opts.IdleReset = 0
	if _, err := openSession(t, opts).Run(context.Background(), "more", nil); err != nil {
		t.Fatal(err)
	}
	reqs = fake.Requests()
	if m := reqs[len(reqs)-1].Messages; len(m) != 3 {
		t.Fatalf("idle_reset 0 dropped the history: %+v", m)
	}
}

// The files and pictures of the messages a compaction summarises reach the summariser
// (a document with the start of its text), so the summary can keep them: once summarised,
// the model sees nothing else of them. Before, the summariser read only the words typed
// beside them.
func TestSummaryIsAskedWithTheFilesTheUserSent(t *testing.T) {
	srv := newOpenAIServer(t)
	summariser(srv)
	dir := t.TempDir()
	notes := writeFile(t, dir, "notes.txt", []byte("the meeting moved to Thursday 14:00"))
	photo := writeFile(t, dir, "photo.jpg", []byte("not decoded"))
	s := openSession(t, harness.SessionOptions{Key: "web:files", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test"})
	if _, err := s.RunWith(context.Background(), "Keep these.", []llm.Part{
		{Type: llm.PartFile, MIME: "text/plain", Path: notes, Name: "notes.txt"},
		{Type: llm.PartImage, MIME: "image/jpeg", Path: photo, Name: "photo.jpg"}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(context.Background(), "And remember this too.", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Compact(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	var ask string
	for _, r := range srv.Requests() {
		if isSummaryRequest(r.Messages) {
			ask = r.Messages[len(r.Messages)-1].Content
		}
	}
	for _, want := range []string{"[User]: Keep these.", "[User sent file notes.txt]", "the meeting moved to Thursday 14:00", "[User sent image photo.jpg]"} {
		if !strings.Contains(ask, want) {
			t.Errorf("the summariser was not given %q:\n%s", want, ask)
		}
	}
}

// A crash during the model call of a turn that began by compacting: the message, answered
// again after the restart, is asked of the model once, and the summary stays. Before, the
// compaction saved after the message kept the earlier attempt on the branch, and the model
// read the message twice in a row.
func TestMessageCutByACrashAfterACompactionIsAskedOnce(t *testing.T) {
	srv := newOpenAIServer(t)
	summariser(srv)
	st := openStore(t)
	opts := harness.SessionOptions{Key: "web:crash", Store: st, Provider: openAI(t, srv), Model: "gpt-test", ContextWindow: 3000}
	s := openSession(t, opts)
	for i := 0; s.Stats().ContextTokens < 2000; i++ {
		if _, err := s.Run(context.Background(), fmt.Sprintf("note %d %s", i, strings.Repeat("x", 300)), nil); err != nil {
			t.Fatal(err)
		}
	}
	// The next message passes the threshold: the turn compacts, then its call hangs.
	prompt := "the big one " + strings.Repeat("y", 1600)
	hang := make(chan struct{})
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		if isSummaryRequest(r.Messages) {
			return openaitest.Reply{Text: "SUMMARY: notes were taken."}
		}
		if r.Messages[len(r.Messages)-1].Content == prompt {
			select {
			case <-hang:
			default:
				close(hang)
				return openaitest.Reply{Hang: true}
			}
		}
		return openaitest.Reply{Text: "answered"}
	})
	ctx, cancel := context.WithCancel(context.Background())
	cut := make(chan struct{})
	go func() {
		defer close(cut)
		_, _ = s.RunAttempt(ctx, harness.Attempt{ID: "17"}, prompt, nil, nil)
	}()
	<-hang
	// What a restart finds on disk: the compaction, and the message it kept.
	again := openSession(t, opts)
	res, err := again.RunAttempt(context.Background(), harness.Attempt{ID: "17", Again: true}, prompt, nil, nil)
	cancel()
	<-cut
	if err != nil || res.Text != "answered" {
		t.Fatalf("asked again: %q %v", res.Text, err)
	}
	reqs := srv.Requests()
	last := reqs[len(reqs)-1].Messages
	n, summary := 0, false
	for _, m := range last {
		n += strings.Count(m.Content, prompt)
		summary = summary || strings.Contains(m.Content, "SUMMARY: notes were taken.")
	}
	if n != 1 || !summary {
		t.Fatalf("the model got the message %d times, the summary: %v", n, summary)
	}
}

// A tool turn that alone outgrows the window (each step fetches a long page): its message
// is not summarised away (a crash must find it, see
// TestToolTurnCompactedMidwayThenCutByACrashIsNotRunAgain), so its oldest steps are left out
// of the request; the message itself stays in every request of the turn, once, and the
// user gets the answer.
func TestToolTurnLongerThanTheWindowKeepsItsMessageInTheRequest(t *testing.T) {
	srv := newOpenAIServer(t)
	const steps = 5
	var mu sync.Mutex
	calls := 0
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		if isSummaryRequest(r.Messages) {
			return openaitest.Reply{Text: "SUMMARY: earlier notes."}
		}
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= steps {
			return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: fmt.Sprintf("f%d", calls), Name: "fetch_page", Arguments: `{}`}}}
		}
		return openaitest.Reply{Text: "The pages are about paragraphs."}
	})
	s := openSession(t, harness.SessionOptions{Key: "web:pages", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test",
		ContextWindow: 3000, Tools: []harness.Tool{pageTool{}}})
	const prompt = "Read the five pages and tell me what they are about."
	res, err := s.RunAttempt(context.Background(), harness.Attempt{ID: "17"}, prompt, nil, nil)
	if err != nil || res.Text != "The pages are about paragraphs." {
		t.Fatalf("%q %v", res.Text, err)
	}
	reqs := srv.Requests()
	if len(reqs) != steps+1 {
		t.Fatalf("%d requests; want the %d steps and the answer", len(reqs), steps)
	}
	for i, r := range reqs {
		n := 0
		for _, m := range r.Messages {
			n += strings.Count(m.Content, prompt)
		}
		if n != 1 {
			t.Errorf("request %d carried the message %d times; want once", i+1, n)
		}
		if msg := validToolTraffic(r.Messages); msg != "" {
			t.Errorf("request %d: %s", i+1, msg)
		}
	}
	last := reqs[len(reqs)-1]
	if _, ok := resultOf(last, "f1"); ok {
		t.Errorf("the last request still carried the first page: the turn did not outgrow the window")
	}
	if _, ok := resultOf(last, fmt.Sprintf("f%d", steps)); !ok {
		t.Errorf("the last request lacked the newest page")
	}
}

// The model finds a message's first request too long: the run compacts with the message on
// the branch, and a crash cuts the retry. The message answered again after the restart is
// asked once, after the summary and what the compaction kept. Before, the earlier attempt
// could not be taken back past the compaction, so the model read the message twice.
func TestMessageCutByACrashAfterAnOverflowCompactionIsAskedOnce(t *testing.T) {
	// We believe the window is larger than the server's: the compaction keeps everything
	// but the notes (a large window), or the newest notes too (a smaller one).
	for _, tc := range []struct {
		name   string
		window int
		kept   string // a note the compaction keeps verbatim; "" for none
	}{{"nothing kept", 100_000, ""}, {"recent notes kept", 4000, "note 11 "}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newOpenAIServer(t)
			summariser(srv)
			opts := harness.SessionOptions{Key: "web:crash", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test", ContextWindow: tc.window}
			s := openSession(t, opts)
			for i := range 12 {
				if _, err := s.Run(context.Background(), fmt.Sprintf("note %d %s", i, strings.Repeat("x", 400)), nil); err != nil {
					t.Fatal(err)
				}
			}
			srv.LimitContext(openaitest.Tokens(srv.Requests()[len(srv.Requests())-1].Body) * 2 / 3)
			const prompt = "and now?"
			hang := make(chan struct{})
			srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
				if isSummaryRequest(r.Messages) {
					return openaitest.Reply{Text: "SUMMARY: notes were taken."}
				}
				select {
				case <-hang:
					return openaitest.Reply{Text: "answered"}
				default:
					close(hang) // the retry after the compaction: the crash comes now
					return openaitest.Reply{Hang: true}
				}
			})
			defer cutRun(s, prompt, hang)()

			res, err := openSession(t, opts).RunAttempt(context.Background(), harness.Attempt{ID: "17", Again: true}, prompt, nil, nil)
			if err != nil || res.Text != "answered" {
				t.Fatalf("asked again: %q %v", res.Text, err)
			}
			check := func(when string) {
				t.Helper()
				reqs := srv.Requests()
				got := strings.Join(userTurnsOf(reqs[len(reqs)-1]), "\n")
				if n := strings.Count(got, prompt); n != 1 {
					t.Errorf("%s the model read the message %d times; want once: %q", when, n, got)
				}
				if !strings.Contains(got, "SUMMARY: notes were taken.") || strings.Contains(got, "note 0 ") {
					t.Errorf("%s the model did not get the summary in place of the old notes: %q", when, got)
				}
				if tc.kept != "" && !strings.Contains(got, tc.kept) {
					t.Errorf("%s the model did not get the notes the compaction kept: %q", when, got)
				}
			}
			check("after the restart")
			// The history on disk says the same: the next message, after another restart,
			// comes after them.
			if _, err := openSession(t, opts).Run(context.Background(), "one more", nil); err != nil {
				t.Fatal(err)
			}
			check("at the next message")
		})
	}
}

// A tool turn so long that the session lets go of its start in memory (hooks keep
// cancelling compaction): the turn still ends with an answer.
func TestToolTurnOutgrowingWhatIsHeldStillAnswers(t *testing.T) {
	srv := newOpenAIServer(t)
	const steps = 14
	var mu sync.Mutex
	calls := 0
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls > 1 && calls <= steps+1 {
			return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: fmt.Sprintf("f%d", calls), Name: "fetch_page", Arguments: `{}`}}}
		}
		return openaitest.Reply{Text: "done"}
	})
	bus := hooks.NewBus(hooks.Options{})
	bus.On(hooks.NameSessionBeforeCompact, "keep-all", func(context.Context, hooks.Event) (any, error) {
		return &hooks.CompactResult{Cancel: true, Reason: "audit"}, nil
	})
	s := openSession(t, harness.SessionOptions{Key: "web:held", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test",
		ContextWindow: 1024, Bus: bus, Tools: []harness.Tool{pageTool{}}})
	if _, err := s.Run(context.Background(), "a long note "+strings.Repeat("n", 16_000), nil); err != nil {
		t.Fatal(err)
	}
	res, err := s.RunAttempt(context.Background(), harness.Attempt{ID: "17"}, "read the pages", nil, nil)
	if err != nil || res.Text != "done" {
		t.Fatalf("%q %v", res.Text, err)
	}
}
