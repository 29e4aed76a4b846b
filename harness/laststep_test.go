package harness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"gateway/harness"
	"gateway/harness/anthropictest"
	"gateway/harness/openaitest"
	"gateway/internal/llm"
	"gateway/internal/secret"
)

// branchMessages are the messages of the session's branch as the history file holds them.
func branchMessages(t *testing.T, s *harness.Session) []llm.Message {
	t.Helper()
	entries, err := s.Entries()
	if err != nil {
		t.Fatal(err)
	}
	var out []llm.Message
	for _, raw := range entries {
		var e struct {
			Type    string      `json:"type"`
			Message llm.Message `json:"message"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		if e.Type == "message" {
			out = append(out, e.Message)
		}
	}
	return out
}

// A model that calls a tool at every step, until it is told it may not: once the steps of
// a run are spent, it is asked once more, its tools listed but not to be called, and the
// user gets its answer rather than an error. The history holds the steps and the answer,
// not the request to answer, and the next message goes on from there.
func TestSpentStepsEndWithTheModelsAnswer(t *testing.T) {
	srv := newOpenAIServer(t)
	calls := 0
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		if r.ToolChoice == "none" {
			return openaitest.Reply{Text: "What I found so far: three results; the fourth lookup is left undone."}
		}
		last := r.Messages[len(r.Messages)-1]
		if last.Role == "user" && last.Content == "thanks" {
			return openaitest.Reply{Text: "You're welcome."}
		}
		calls++
		return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: fmt.Sprintf("call_%d", calls), Name: "lookup", Arguments: `{"q":"x"}`}}}
	})
	st := openStore(t)
	opts := harness.SessionOptions{Key: "web:steps", Store: st, Provider: openAI(t, srv), Tools: []harness.Tool{lookupTool{}}, MaxTurns: 4}
	s := openSession(t, opts)
	var u updates
	res, err := s.Run(context.Background(), "look everything up", u.on)
	if err != nil {
		t.Fatalf("the run failed: %v", err)
	}
	if res.Text != "What I found so far: three results; the fourth lookup is left undone." || res.Ended != harness.EndedWhole {
		t.Fatalf("result %+v", res)
	}
	if d := u.of(harness.UpdateDelta); len(d) == 0 || !strings.HasSuffix(d[len(d)-1].Text, "undone.") {
		t.Fatalf("the answer was not streamed to the chat: %+v", d)
	}
	reqs := srv.Requests()
	if len(reqs) != 5 {
		t.Fatalf("%d model calls; want 4 steps and the last", len(reqs))
	}
	for i, r := range reqs[:4] {
		if r.ToolChoice != "" || len(r.Tools) != 1 {
			t.Fatalf("step %d: tool_choice %q, tools %v", i+1, r.ToolChoice, r.Tools)
		}
	}
	final := reqs[4]
	m := final.Messages
	if final.ToolChoice != "none" || len(final.Tools) != 1 || m[len(m)-2].Role != "tool" ||
		m[len(m)-1].Role != "user" || !strings.Contains(m[len(m)-1].Content, "cannot call tools any more") {
		t.Fatalf("the last call: tool_choice %q, tools %v, ends %+v", final.ToolChoice, final.Tools, m[len(m)-2:])
	}

	check := func(s *harness.Session) {
		t.Helper()
		h := branchMessages(t, s)
		// the prompt, 4 × (call, result), the answer
		if len(h) != 10 || h[0].Content != "look everything up" || h[9].Role != llm.RoleAssistant ||
			h[9].Content != res.Text || len(h[9].ToolCalls) != 0 || h[8].Role != llm.RoleTool {
			t.Fatalf("history %+v", h)
		}
		for _, x := range h {
			if strings.Contains(x.Content, "cannot call tools any more") {
				t.Fatalf("the request to answer is in the history: %+v", x)
			}
		}
	}
	check(s)
	check(openSession(t, opts)) // as the file holds it

	if res, err := s.Run(context.Background(), "thanks", nil); err != nil || res.Text != "You're welcome." {
		t.Fatalf("the next message: %q %v", res.Text, err)
	}
	m = srv.Requests()[5].Messages
	if m[len(m)-2].Role != "assistant" || m[len(m)-2].Content != res.Text || m[len(m)-1].Content != "thanks" {
		t.Fatalf("the next request ends %+v", m[len(m)-2:])
	}
}

// Anthropic's API refuses a conversation with tool calls in it when no tools are defined:
// the last call lists them, with tool_choice none.
func TestSpentStepsEndWithTheModelsAnswerAnthropic(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	srv.SetFunc(func(r anthropictest.Request) anthropictest.Reply {
		if r.ToolChoice == "none" {
			return anthropictest.Reply{Text: "Here is what I have."}
		}
		return anthropictest.Reply{ToolUses: []anthropictest.ToolUse{{Name: "lookup", Input: `{"q":"x"}`}}}
	})
	p, err := harness.NewProvider(harness.Config{Provider: "anthropic", Model: "claude-test", BaseURL: srv.URL(), APIKey: secret.Secret(testKey)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: p, Tools: []harness.Tool{lookupTool{}}, MaxTurns: 3})
	res, err := s.Run(context.Background(), "look everything up", nil)
	if err != nil || res.Text != "Here is what I have." {
		t.Fatalf("%q %v", res.Text, err)
	}
	reqs := srv.Requests()
	if last := reqs[len(reqs)-1]; len(reqs) != 4 || last.ToolChoice != "none" || len(last.Tools) != 1 {
		t.Fatalf("%d calls; the last: tool_choice %q, tools %v", len(reqs), last.ToolChoice, last.Tools)
	}
}

// A server that ignores tool_choice and keeps calling tools: nothing runs the calls of the
// last step, the user is told the steps ran out, as before, and the history stays one the
// model API takes (no call without its result).
func TestSpentStepsWithoutAnAnswerFailAsBefore(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		if last := r.Messages[len(r.Messages)-1]; last.Role == "user" && last.Content == "and now?" {
			return openaitest.Reply{Text: "fine"}
		}
		return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{Name: "lookup", Arguments: `{"q":"x"}`}}}
	})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv), Tools: []harness.Tool{lookupTool{}}, MaxTurns: 2})
	_, err := s.Run(context.Background(), "look everything up", nil)
	if err == nil || !strings.Contains(err.Error(), "stopped after 2 steps") {
		t.Fatalf("error %v", err)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("%d model calls; want 2 steps and the last", n)
	}
	if res, err := s.Run(context.Background(), "and now?", nil); err != nil || res.Text != "fine" {
		t.Fatalf("the next message: %q %v", res.Text, err)
	}
	open := map[string]bool{}
	for _, m := range srv.Requests()[3].Messages {
		for _, c := range m.ToolCalls {
			open[c.ID] = true
		}
		delete(open, m.ToolCallID)
	}
	if len(open) > 0 {
		t.Fatalf("calls without results in the next request: %v", open)
	}
}
