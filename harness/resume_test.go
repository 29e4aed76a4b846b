package harness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"gateway/harness"
	"gateway/harness/openaitest"
	"gateway/hooks"
	"gateway/internal/llm"
)

// sideTool is a tool with a side effect (it sends a mail, opens a ticket): it counts its
// runs. With hold set, its first run tells started and waits for hold or its ctx, as a
// tool does when a crash cuts it.
type sideTool struct {
	name    string
	out     string // its result; "<name> done" when empty
	runs    atomic.Int32
	started chan struct{}
	hold    chan struct{}
}

func (s *sideTool) Def() llm.ToolDef {
	return llm.ToolDef{Name: s.name, Description: "does " + s.name, Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (s *sideTool) Run(ctx context.Context, _ json.RawMessage) (string, error) {
	if s.runs.Add(1) == 1 && s.hold != nil {
		close(s.started)
		select {
		case <-s.hold:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if s.out != "" {
		return s.out, nil
	}
	return s.name + " done", nil
}

// toolStepModel answers a conversation that ends with the user's message with one step
// calling each tool named (ids call_<name>), and one that ends otherwise with "answered".
// A request for which hang says so is never answered (a crash comes).
func toolStepModel(t *testing.T, hang func(openaitest.Request) bool, tools ...string) *openaitest.Server {
	srv := newOpenAIServer(t)
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		if hang != nil && hang(r) {
			return openaitest.Reply{Hang: true}
		}
		if r.Messages[len(r.Messages)-1].Role != "user" {
			return openaitest.Reply{Text: "answered"}
		}
		var calls []openaitest.ToolCall
		for _, n := range tools {
			calls = append(calls, openaitest.ToolCall{ID: "call_" + n, Name: n, Arguments: `{}`})
		}
		return openaitest.Reply{ToolCalls: calls}
	})
	return srv
}

// resultOf is the result the request carries for the call id; ok is false when none.
func resultOf(r openaitest.Request, id string) (content string, ok bool) {
	for _, m := range r.Messages {
		if m.Role == "tool" && m.ToolCallID == id {
			return m.Content, true
		}
	}
	return "", false
}

// cutRun starts the message 17 in s and returns when ready says the crash may come; the
// returned func ends that run (the crashed process, gone) and waits for it.
func cutRun(s *harness.Session, prompt string, ready <-chan struct{}) (gone func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.RunAttempt(ctx, harness.Attempt{ID: "17"}, prompt, nil, nil)
	}()
	<-ready
	return func() { cancel(); <-done }
}

// A crash while the second tool of a step runs, the first one's result saved: the message
// answered again after the restart runs neither tool again. The model gets the first
// tool's saved result, and for the cut call a result saying it was interrupted and its
// outcome is unknown, which the history keeps.
func TestToolStepCutByACrashIsNotRunAgain(t *testing.T) {
	srv := toolStepModel(t, nil, "send_mail", "open_ticket")
	mail := &sideTool{name: "send_mail"}
	ticket := &sideTool{name: "open_ticket", started: make(chan struct{}), hold: make(chan struct{})}
	opts := harness.SessionOptions{Key: "web:crash", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test",
		Tools: []harness.Tool{mail, ticket}}
	const prompt = "mail Bob and open a ticket"
	// The cut run is ended last: the process a crash ended writes nothing more.
	defer cutRun(openSession(t, opts), prompt, ticket.started)()
	// What a restart finds on disk: the step, and the first call's result.
	again := openSession(t, opts)
	res, err := again.RunAttempt(context.Background(), harness.Attempt{ID: "17", Again: true}, prompt, nil, nil)
	if err != nil || res.Text != "answered" {
		t.Fatalf("answered again: %q %v", res.Text, err)
	}
	if m, k := mail.runs.Load(), ticket.runs.Load(); m != 1 || k != 1 {
		t.Fatalf("send_mail ran %d times, open_ticket %d; want each once", m, k)
	}
	reqs := srv.Requests()
	last := reqs[len(reqs)-1]
	if got, _ := resultOf(last, "call_send_mail"); got != "send_mail done" {
		t.Errorf("the model got %q for the call that finished; want its saved result", got)
	}
	if got, _ := resultOf(last, "call_open_ticket"); !strings.Contains(got, "interrupted") || !strings.Contains(got, "unknown") {
		t.Errorf("the model got %q for the cut call; want that it was interrupted and its outcome is unknown", got)
	}
	if n := strings.Count(strings.Join(userTurnsOf(last), "\n"), prompt); n != 1 {
		t.Errorf("the model got the message %d times; want once", n)
	}

	// The cut call's result is in the history, an error result as any other.
	entries, err := openSession(t, opts).Entries()
	if err != nil {
		t.Fatal(err)
	}
	found := slices.ContainsFunc(entries, func(raw json.RawMessage) bool {
		var e struct {
			Message llm.Message `json:"message"`
		}
		return json.Unmarshal(raw, &e) == nil && e.Message.Role == llm.RoleTool &&
			e.Message.ToolCallID == "call_open_ticket" && e.Message.IsError && strings.Contains(e.Message.Content, "interrupted")
	})
	if !found {
		t.Errorf("the history has no error result for the cut call: %s", entries)
	}
}

// The result a cut call gets after the restart is a tool result as any other: the
// tool_result hook sees it, an error, and may change it, the model and the history get it
// as the hook left it, and the chat shows the call's tool line as failed. The tool still
// does not run again, and hooks see the run begin (agent_start) before that result.
func TestCutToolCallsResultGoesThroughTheToolResultHook(t *testing.T) {
	srv := toolStepModel(t, nil, "open_ticket")
	ticket := &sideTool{name: "open_ticket", started: make(chan struct{}), hold: make(chan struct{})}
	opts := harness.SessionOptions{Key: "web:crash", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test",
		Tools: []harness.Tool{ticket}}
	const prompt = "open a ticket"
	defer cutRun(openSession(t, opts), prompt, ticket.started)()

	bus := hooks.NewBus(hooks.Options{})
	var (
		mu     sync.Mutex
		seen   []hooks.ToolResult
		events []string
	)
	bus.Observe("test:order", func(_ context.Context, ev hooks.Event) {
		mu.Lock()
		events = append(events, ev.EventName())
		mu.Unlock()
	})
	bus.On(hooks.NameToolResult, "test:audit", func(_ context.Context, ev hooks.Event) (any, error) {
		tr := ev.(*hooks.ToolResult)
		mu.Lock()
		seen = append(seen, *tr)
		mu.Unlock()
		audited := "[audited] " + tr.Content
		return &hooks.ToolResultPatch{Content: &audited}, nil
	})
	withHook := opts
	withHook.Bus = bus
	var u updates
	res, err := openSession(t, withHook).RunAttempt(context.Background(), harness.Attempt{ID: "17", Again: true}, prompt, nil, u.on)
	if err != nil || res.Text != "answered" {
		t.Fatalf("answered again: %q %v", res.Text, err)
	}
	if n := ticket.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times; want once", n)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].ToolCallID != "call_open_ticket" || seen[0].Tool != "open_ticket" ||
		!seen[0].IsError || !strings.Contains(seen[0].Content, "interrupted") {
		t.Fatalf("the tool_result hook saw %+v; want the cut call's result once, an error saying it was interrupted", seen)
	}
	if start, result := slices.Index(events, hooks.NameAgentStart), slices.Index(events, hooks.NameToolResult); start < 0 || result < start {
		t.Errorf("hooks saw %q; want agent_start before the cut call's tool_result, as in any run", events)
	}
	reqs := srv.Requests()
	if got, _ := resultOf(reqs[len(reqs)-1], "call_open_ticket"); !strings.HasPrefix(got, "[audited] ") || !strings.Contains(got, "interrupted") {
		t.Errorf("the model got %q for the cut call; want the result as the hook changed it", got)
	}
	entries, err := openSession(t, opts).Entries()
	if err != nil {
		t.Fatal(err)
	}
	kept := slices.ContainsFunc(entries, func(raw json.RawMessage) bool {
		var e struct {
			Message llm.Message `json:"message"`
		}
		return json.Unmarshal(raw, &e) == nil && e.Message.ToolCallID == "call_open_ticket" &&
			e.Message.IsError && strings.HasPrefix(e.Message.Content, "[audited] ")
	})
	if !kept {
		t.Errorf("the history does not keep the cut call's result as the hook changed it: %s", entries)
	}
	starts, ends := u.of(harness.UpdateToolStart), u.of(harness.UpdateToolEnd)
	if len(starts) != 1 || starts[0].ToolID != "call_open_ticket" ||
		len(ends) != 1 || ends[0].ToolID != "call_open_ticket" || !ends[0].IsError {
		t.Errorf("the chat got tool lines start %+v end %+v; want the cut call's, ending as failed", starts, ends)
	}
}

// A crash while the model writes its answer from a tool's saved result: the message
// answered again goes on from that result; the tool does not run again.
func TestToolResultSavedBeforeACrashIsUsedAfterIt(t *testing.T) {
	asked := make(chan struct{})
	var hung atomic.Bool
	srv := toolStepModel(t, func(r openaitest.Request) bool {
		if r.Messages[len(r.Messages)-1].Role != "tool" || hung.Swap(true) {
			return false
		}
		close(asked)
		return true
	}, "open_ticket")
	ticket := &sideTool{name: "open_ticket"}
	opts := harness.SessionOptions{Key: "web:crash", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test",
		Tools: []harness.Tool{ticket}}
	const prompt = "open a ticket"
	defer cutRun(openSession(t, opts), prompt, asked)()
	res, err := openSession(t, opts).RunAttempt(context.Background(), harness.Attempt{ID: "17", Again: true}, prompt, nil, nil)
	if err != nil || res.Text != "answered" {
		t.Fatalf("answered again: %q %v", res.Text, err)
	}
	if n := ticket.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times; want once", n)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("model calls = %d; want the step, the cut answer and the answer after the restart", len(reqs))
	}
	if got, _ := resultOf(reqs[2], "call_open_ticket"); got != "open_ticket done" {
		t.Errorf("after the restart the model got %q for the call; want its saved result", got)
	}
}

// A crash after the whole answer was saved but before the chat got it (a message:send
// hook still working): the message answered again does not run the tool of its step
// again; the model answers again from the saved result, without its earlier answer.
func TestAnswerAfterAToolStepSavedBeforeACrashIsAskedAgainFromTheStep(t *testing.T) {
	srv := toolStepModel(t, nil, "open_ticket")
	ticket := &sideTool{name: "open_ticket"}
	opts := harness.SessionOptions{Key: "web:crash", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test",
		Tools: []harness.Tool{ticket}}
	const prompt = "open a ticket"
	if _, err := openSession(t, opts).RunAttempt(context.Background(), harness.Attempt{ID: "17"}, prompt, nil, nil); err != nil {
		t.Fatal(err)
	}
	res, err := openSession(t, opts).RunAttempt(context.Background(), harness.Attempt{ID: "17", Again: true}, prompt, nil, nil)
	if err != nil || res.Text != "answered" {
		t.Fatalf("answered again: %q %v", res.Text, err)
	}
	if n := ticket.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times; want once", n)
	}
	reqs := srv.Requests()
	var roles []string
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role != "system" {
			roles = append(roles, m.Role)
		}
	}
	if want := []string{"user", "assistant", "tool"}; !slices.Equal(roles, want) {
		t.Errorf("after the restart the model was asked with %q; want %q (the step, not the earlier answer)", roles, want)
	}
}

// userTurnsOf are the user messages of a request.
func userTurnsOf(r openaitest.Request) []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == "user" {
			out = append(out, m.Content)
		}
	}
	return out
}

// A message steered into a tool turn and saved after its results, then a crash: the turn
// answered again goes on from its tool step without the steered message, which comes
// after it as a turn of its own (its own journal entry): the model reads it once.
func TestSteerSavedIntoACutToolTurnIsReadOnce(t *testing.T) {
	const prompt, steered = "open a ticket", "and mark it urgent"
	asked := make(chan struct{})
	var hung atomic.Bool
	srv := newOpenAIServer(t)
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		last := r.Messages[len(r.Messages)-1]
		switch {
		case last.Role == "user" && last.Content == prompt:
			return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "call_open_ticket", Name: "open_ticket", Arguments: `{}`}}}
		case last.Role == "user" && strings.Contains(last.Content, steered) && !hung.Swap(true):
			close(asked)
			return openaitest.Reply{Hang: true}
		}
		return openaitest.Reply{Text: "answered"}
	})
	ticket := &sideTool{name: "open_ticket", started: make(chan struct{}), hold: make(chan struct{})}
	opts := harness.SessionOptions{Key: "web:crash", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test",
		Tools: []harness.Tool{ticket}}

	cut := openSession(t, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = cut.RunAttempt(ctx, harness.Attempt{ID: "17"}, prompt, nil, nil)
	}()
	<-ticket.started
	if !cut.Steer(steered) {
		t.Fatal("the running turn refused the steered message")
	}
	close(ticket.hold)
	<-asked // the steered message is saved after the tool's result; the crash comes now
	defer func() { cancel(); <-done }()

	again := openSession(t, opts)
	if res, err := again.RunAttempt(context.Background(), harness.Attempt{ID: "17", Again: true}, prompt, nil, nil); err != nil || res.Text != "answered" {
		t.Fatalf("answered again: %q %v", res.Text, err)
	}
	if n := ticket.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times; want once", n)
	}
	reqs := srv.Requests()
	if got := strings.Join(userTurnsOf(reqs[len(reqs)-1]), "\n"); strings.Contains(got, steered) {
		t.Errorf("the message answered again carried the steered one: %q", got)
	}
	// The steered message's own turn, replayed from its journal entry.
	if _, err := again.RunAttempt(context.Background(), harness.Attempt{ID: "18", Again: true}, steered, nil, nil); err != nil {
		t.Fatal(err)
	}
	reqs = srv.Requests()
	if n := strings.Count(strings.Join(userTurnsOf(reqs[len(reqs)-1]), "\n"), steered); n != 1 {
		t.Errorf("the model read the steered message %d times; want once", n)
	}
}

// A long tool turn that compacts the conversation between its steps, then a crash while
// the next step's tool runs: the message answered again after the restart goes on from its
// saved steps. Neither tool runs again and the model reads the message once. Before, the
// compaction summarised the message away with the turn's first step, so it was asked again
// from the start: the mail went out twice and the model read the message in the summary and
// again.
func TestToolTurnCompactedMidwayThenCutByACrashIsNotRunAgain(t *testing.T) {
	srv := newOpenAIServer(t)
	summariser(srv)
	mail := &sideTool{name: "send_mail", out: "mail sent; receipt: " + strings.Repeat("r", 2800)}
	ticket := &sideTool{name: "open_ticket", started: make(chan struct{}), hold: make(chan struct{})}
	opts := harness.SessionOptions{Key: "web:crash", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test",
		ContextWindow: 3000, Tools: []harness.Tool{mail, ticket}}
	s := openSession(t, opts)
	for i := 0; s.Stats().ContextTokens < 1600; i++ {
		if _, err := s.Run(context.Background(), fmt.Sprintf("note %d %s", i, strings.Repeat("x", 300)), nil); err != nil {
			t.Fatal(err)
		}
	}
	// The message joins without a compaction ahead of it; the mail's long receipt then
	// passes the threshold, so the turn compacts before its second step.
	prompt := "mail Bob the report, then open a ticket for it " + strings.Repeat("z", 400)
	var summaries atomic.Int32
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		if isSummaryRequest(r.Messages) {
			summaries.Add(1)
			// A summary tells what it summarised, the user's message too.
			text := "SUMMARY: notes were taken."
			if strings.Contains(r.Messages[len(r.Messages)-1].Content, prompt) {
				text += " The user asked: " + prompt
			}
			return openaitest.Reply{Text: text}
		}
		last := r.Messages[len(r.Messages)-1]
		switch {
		case last.Role == "user":
			return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "call_send_mail", Name: "send_mail", Arguments: `{}`}}}
		case last.Role == "tool" && last.ToolCallID == "call_send_mail":
			return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "call_open_ticket", Name: "open_ticket", Arguments: `{}`}}}
		}
		return openaitest.Reply{Text: "answered"}
	})
	gone := cutRun(s, prompt, ticket.started)
	defer gone() // the process a crash ended writes nothing more
	if summaries.Load() == 0 {
		t.Fatal("the turn did not compact between its steps; the test's premise is gone")
	}

	again := openSession(t, opts)
	res, err := again.RunAttempt(context.Background(), harness.Attempt{ID: "17", Again: true}, prompt, nil, nil)
	if err != nil || res.Text != "answered" {
		t.Fatalf("answered again: %q %v", res.Text, err)
	}
	if m, k := mail.runs.Load(), ticket.runs.Load(); m != 1 || k != 1 {
		t.Errorf("send_mail ran %d times, open_ticket %d; want each once", m, k)
	}
	reqs := srv.Requests()
	last := reqs[len(reqs)-1]
	n := 0
	for _, m := range last.Messages {
		n += strings.Count(m.Content, prompt)
	}
	if n != 1 {
		t.Errorf("after the restart the model read the message %d times; want once", n)
	}
	if got, _ := resultOf(last, "call_send_mail"); !strings.HasPrefix(got, "mail sent") {
		t.Errorf("after the restart the model got %q for the mail; want its saved result", got)
	}
	if got, _ := resultOf(last, "call_open_ticket"); !strings.Contains(got, "interrupted") {
		t.Errorf("after the restart the model got %q for the cut call; want that it was interrupted", got)
	}
	if got := strings.Join(userTurnsOf(last), "\n"); !strings.Contains(got, "SUMMARY: notes were taken.") {
		t.Errorf("after the restart the model did not get the summary: %q", got)
	}
}
