package harness

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"gateway/internal/llm"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond},
		{http.Header{"Retry-After": {now.Add(10 * time.Second).Format(http.TimeFormat)}}, 10 * time.Second},
		{http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0},
		{http.Header{"Retry-After": {"soon"}}, 0},
		{http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, 250 * time.Millisecond},
		{nil, 0},
	}
	for _, c := range cases {
		if got := parseRetryAfter(c.h, now); got != c.want {
			t.Errorf("%v → %v, want %v", c.h, got, c.want)
		}
	}
}

func TestRetryWaitIsBoundedAndGrows(t *testing.T) {
	one := func() float64 { return 1 }
	if w := retryWait(1, 0, one); w != baseRetryWait {
		t.Fatalf("first wait %v", w)
	}
	if w := retryWait(3, 0, one); w != 4*baseRetryWait {
		t.Fatalf("third wait %v", w)
	}
	if w := retryWait(30, 0, one); w != maxRetryWait {
		t.Fatalf("capped wait %v", w)
	}
	if w := retryWait(1, 10*time.Minute, one); w != maxRetryWait {
		t.Fatalf("server wait not capped: %v", w)
	}
	if w := retryWait(1, 0, func() float64 { return 0 }); w != baseRetryWait/2 {
		t.Fatalf("jitter floor %v", w)
	}
}

func TestRepairSendsAValidSequence(t *testing.T) {
	user := func(s string) llm.Message { return llm.Message{Role: llm.RoleUser, Content: s} }
	calls := llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "a", Name: "t"}, {ID: "b", Name: "t"}}}
	res := func(id string) llm.Message { return llm.Message{Role: llm.RoleTool, ToolCallID: id, Content: "r"} }
	msgs := []llm.Message{
		res("a"),                    // orphan at the start
		user("u2"), calls, res("b"), // "a" lost in a crash
		res("zz"), // orphan
		user("u3"),
	}
	var roles []string
	for _, m := range repair(msgs) {
		roles = append(roles, string(m.Role)+":"+m.Content+m.ToolCallID)
	}
	want := "user:u2 assistant: tool:rb tool:error: no result was recorded for this calla user:u3"
	if strings.Join(roles, " ") != want {
		t.Fatalf("repair = %s\nwant     %s", strings.Join(roles, " "), want)
	}
}

// entriesOf turns messages into history entries of tokens each.
func entriesOf(msgs []llm.Message, tokens int) []entry {
	out := make([]entry, len(msgs))
	for i, m := range msgs {
		out[i] = entry{id: fmt.Sprint(i), msg: m, tokens: tokens}
	}
	return out
}

func TestCutPointNeverSplitsAToolCallFromItsResults(t *testing.T) {
	user := func(s string) llm.Message { return llm.Message{Role: llm.RoleUser, Content: s} }
	call := func(id string) llm.Message {
		return llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: "t"}}}
	}
	res := func(id string) llm.Message { return llm.Message{Role: llm.RoleTool, ToolCallID: id, Content: "r"} }
	answer := llm.Message{Role: llm.RoleAssistant, Content: "x"}
	msgs := []llm.Message{user("u1"), answer, user("u2"), call("a"), res("a"), call("b"), res("b"), answer, user("u3"), call("c"), res("c"), answer}
	for keep := 1; keep <= len(msgs)+1; keep++ {
		cut := cutPoint(entriesOf(msgs, 1), keep)
		if cut > 0 && msgs[cut].Role == llm.RoleTool {
			t.Fatalf("keep %d: the cut falls on a tool result (%d)", keep, cut)
		}
		// Every kept result has its call kept too.
		kept := msgs[cut:]
		for i, m := range kept {
			if m.Role != llm.RoleTool {
				continue
			}
			found := false
			for _, c := range kept[:i] {
				if callIndex(c.ToolCalls, m.ToolCallID) >= 0 {
					found = true
				}
			}
			if !found {
				t.Fatalf("keep %d: result %s kept without its call", keep, m.ToolCallID)
			}
		}
		if cut >= len(msgs) {
			t.Fatalf("keep %d: the newest message was cut", keep)
		}
	}
	// A user message in reach is preferred.
	if cut := cutPoint(entriesOf(msgs, 1), 6); msgs[cut].Content != "u3" {
		t.Fatalf("cut at %d (%+v), want u3", cut, msgs[cut])
	}
	// One long tool chain: the cut lands on an assistant call, never inside a call's results.
	chain := []llm.Message{user("start")}
	for i := range 10 {
		id := fmt.Sprint("c", i)
		chain = append(chain, call(id), res(id))
	}
	cut := cutPoint(entriesOf(chain, 1), 5)
	if chain[cut].Role != llm.RoleAssistant || len(chain[cut].ToolCalls) == 0 {
		t.Fatalf("chain cut at %+v", chain[cut])
	}
	if got := cutPoint(entriesOf(chain, 1), 100); got != 0 {
		t.Fatalf("everything fits, cut = %d", got)
	}
}

func TestContextWindowDefaults(t *testing.T) {
	for model, want := range map[string]int{
		"gpt-4o-mini": 128_000, "openai/gpt-4o": 128_000, "gpt-4.1-mini": 1_047_576, "gpt-4": 8_192,
		"claude-sonnet-4-5": 200_000, "llama3.2:3b": 128_000, "llama3:8b": 8_192, "my-own-model": defaultContextWindow,
	} {
		if got := ContextWindow(model, 0); got != want {
			t.Errorf("%s: %d, want %d", model, got, want)
		}
	}
	if got := ContextWindow("gpt-4o", 50_000); got != 50_000 {
		t.Errorf("configured window ignored: %d", got)
	}
	b := newBudget(100_000, 0)
	if b.threshold >= b.window || b.keep >= b.threshold || b.summary <= 0 {
		t.Errorf("budget %+v", b)
	}
}

func TestOverflowWordings(t *testing.T) {
	for _, s := range []string{
		"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
		"prompt is too long: 210000 tokens > 200000 maximum",
		"the request exceeds the available context size, try increasing it",
		"Please reduce the length of the messages or completion.",
		"context_length_exceeded",
		"input length and `max_tokens` exceed context limit: 196112 + 8192 > 200000, decrease input length or `max_tokens` and try again",
	} {
		if !isOverflowText(s) {
			t.Errorf("not recognised: %q", s)
		}
	}
	if isOverflowText("Invalid API key") || isOverflowText("model not found") {
		t.Error("ordinary errors taken for overflow")
	}
}
