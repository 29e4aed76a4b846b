package gatewaycli

import (
	"net/http"
	"strings"
	"testing"

	"gateway/harness"
)

// A gateway with no model (echo) told each chat's first message "set llm.provider
// (openai or anthropic), llm.model and llm.api_key in the config": the admin's words, in
// every chat. The chat now reads that no model is set up and that whoever runs the gateway
// can connect one; run's log says how, naming the keys.
func TestEchoTellsTheChatPlainlyAndTheLogHow(t *testing.T) {
	root := t.TempDir()
	g := launchGatewayEdited(t, root, "", 1, func(code int, _ string) bool { return code == http.StatusOK }, func(yaml string) string {
		return strings.Replace(yaml, "provider: openai\n  model: test-model\n", "provider: echo\n", 1)
	})
	got := g.user("chat-echo").ask("hello")
	text := got[len(got)-1].Text
	if got[len(got)-1].Type != "done" || !strings.Contains(text, "echo: hello") || !strings.Contains(text, "No model is set up yet") {
		t.Fatalf("the first answer: %v %q; want the notice and the echo", frameTypes(got), text)
	}
	for _, w := range []string{"llm.", "OPENAI_API_KEY", "config"} {
		if strings.Contains(text, w) {
			t.Errorf("the chat read %q, which names %q", text, w)
		}
	}
	if recs := g.waitLog(harness.EchoLog, 1); recs[0]["profiles"] != "assistant" {
		t.Errorf("the log names the profiles %v; want assistant", recs[0]["profiles"])
	}
}
