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
