package harness

import (
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

func TestWindowSendsAValidSequence(t *testing.T) {
	user := func(s string) llm.Message { return llm.Message{Role: llm.RoleUser, Content: s} }
	calls := llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "a", Name: "t"}, {ID: "b", Name: "t"}}}
	res := func(id string) llm.Message { return llm.Message{Role: llm.RoleTool, ToolCallID: id, Content: "r"} }
	msgs := []llm.Message{
		user("u1"), calls, res("a"), res("b"), {Role: llm.RoleAssistant, Content: "x"},
		user("u2"), calls, res("b"), // "a" lost in a crash
		res("zz"), // orphan
		user("u3"),
	}
	got := window(msgs, 6) // the cut falls on a tool result: it moves on to u2
	var roles []string
	for _, m := range got {
		roles = append(roles, string(m.Role)+":"+m.Content+m.ToolCallID)
	}
	want := "user:u2 assistant: tool:rb tool:error: no result was recorded for this calla user:u3"
	if strings.Join(roles, " ") != want {
		t.Fatalf("window = %s\nwant     %s", strings.Join(roles, " "), want)
	}

	// A tool chain longer than the window reaches back to its user message.
	long := []llm.Message{user("start")}
	for range 10 {
		long = append(long, llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c", Name: "t"}}}, res("c"))
	}
	if w := window(long, 4); w[0].Content != "start" || len(w) != len(long) {
		t.Fatalf("long chain window starts with %+v (%d)", w[0], len(w))
	}
}
