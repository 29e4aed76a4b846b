package anthropictest_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"gateway/harness/anthropictest"
)

// The fake refuses a request whose turns the API would refuse, with the API's words, and
// answers one in the API's order: a test through it then shows that the provider's
// requests would be taken by the real API.
func TestTheFakeHoldsRequestsToTheAPIsTurnOrder(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	use := `{"role": "assistant", "content": [{"type": "text", "text": "Let me look."}, {"type": "tool_use", "id": "t1", "name": "clock", "input": {}}]}`
	result := `{"type": "tool_result", "tool_use_id": "t1", "content": "noon"}`
	note := `{"type": "text", "text": "[system note] be brief"}`
	cases := []struct {
		name, messages, refusal string
	}{
		{"valid", `[{"role": "user", "content": "time?"}, ` + use + `, {"role": "user", "content": [` + result + `, ` + note + `]}]`, ""},
		{"a system role", `[{"role": "user", "content": "hi"}, {"role": "system", "content": "be brief"}]`, "Input should be 'user' or 'assistant'"},
		{"an answer first", `[{"role": "assistant", "content": "hi"}, {"role": "user", "content": "hi"}]`, `first message must use the "user" role`},
		{"two users in a row", `[{"role": "user", "content": "hi"}, {"role": "user", "content": "there"}]`, `found multiple "user" roles in a row`},
		{"text before the result", `[{"role": "user", "content": "time?"}, ` + use + `, {"role": "user", "content": [` + note + `, ` + result + `]}]`,
			"`tool_use` ids were found without `tool_result` blocks immediately after: t1"},
		{"no result", `[{"role": "user", "content": "time?"}, ` + use + `, {"role": "user", "content": "and?"}]`,
			"`tool_use` ids were found without `tool_result` blocks immediately after: t1"},
		{"a tool use last", `[{"role": "user", "content": "time?"}, ` + use + `]`,
			"`tool_use` ids were found without `tool_result` blocks immediately after: t1"},
		{"a result of no call", `[{"role": "user", "content": "time?"}, {"role": "assistant", "content": "noon"}, {"role": "user", "content": [` + result + `]}]`,
			"unexpected `tool_use_id` found in `tool_result` blocks: t1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := `{"model": "claude-test", "max_tokens": 100, "tools": [{"name": "clock", "input_schema": {"type": "object"}}], "messages": ` + c.messages + `}`
			client := &http.Client{Timeout: time.Minute}
			resp, err := client.Post(srv.URL()+"/v1/messages", "application/json", bytes.NewBufferString(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if c.refusal == "" {
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("a valid request was answered %d: %s", resp.StatusCode, b)
				}
				return
			}
			var e struct {
				Error struct{ Type, Message string }
			}
			_ = json.Unmarshal(b, &e)
			if resp.StatusCode != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, c.refusal) {
				t.Fatalf("answered %d %s; want 400 saying %q", resp.StatusCode, b, c.refusal)
			}
		})
	}
}

// The fake's prompt cache counts as the API does: a prefix marked with cache_control is
// written once, read by a request that begins with it, and more than four marks are
// refused.
func TestTheFakeKeepsAPromptCache(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	srv.SetCacheMin(1)
	mark := `, "cache_control": {"type": "ephemeral"}`
	post := func(messages string) int {
		body := `{"model": "claude-test", "max_tokens": 100, "system": [{"type": "text", "text": "be brief"` + mark + `}], "messages": ` + messages + `}`
		client := &http.Client{Timeout: time.Minute}
		resp, err := client.Post(srv.URL()+"/v1/messages", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	first := `{"role": "user", "content": [{"type": "text", "text": "hi"` + mark + `}]}`
	post(`[` + first + `]`)
	post(`[{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": [{"type": "text", "text": "and?"` + mark + `}]}]`)
	reqs := srv.Requests()
	if w, r := reqs[0].Cache.Written, reqs[1].Cache.Read; w == 0 || r != w {
		t.Fatalf("the first request wrote %d tokens, the second read %d; want all of them read", w, r)
	}
	if reqs[1].Cache.Written == 0 {
		t.Errorf("the second request wrote nothing of its longer prefix")
	}
	many := strings.Repeat(`{"role": "user", "content": [{"type": "text", "text": "a"`+mark+`}]}, {"role": "assistant", "content": "b"}, `, 4)
	if code := post(`[` + many + first + `]`); code != http.StatusBadRequest {
		t.Errorf("six marks were answered %d; want 400", code)
	}
}
