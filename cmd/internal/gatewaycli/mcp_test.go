package gatewaycli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// gateway check reaches each MCP server and lists its tools; an unreachable one is a
// problem that names it, and a secret header is masked in the printed config.
func TestCheckListsMCPTools(t *testing.T) {
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: "ping", Description: "pong"}, func(ctx context.Context, r *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil, nil
		})
		return s
	}, nil))
	defer srv.Close()
	path := writeConfig(t, "state_dir: STATE\nmcp:\n  - {name: up, url: \""+srv.URL+"\", headers: {Authorization: \"Bearer very-secret-value\"}}\n")
	code, out := cli(t, context.Background(), nil, "check", "--config", path)
	if code != 0 || !strings.Contains(out, "mcp up: 1 tools: ping") || strings.Contains(out, "very-secret-value") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	path = writeConfig(t, "state_dir: STATE\nmcp:\n  - {name: down, url: \"http://127.0.0.1:1/mcp\"}\n  - {name: \"bad name\", command: [x]}\n")
	code, out = cli(t, context.Background(), nil, "check", "--config", path)
	if code != 1 || !strings.Contains(out, "bad name") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	path = writeConfig(t, "state_dir: STATE\nmcp:\n  - {name: down, url: \"http://127.0.0.1:1/mcp\"}\n")
	code, out = cli(t, context.Background(), nil, "check", "--config", path)
	if code != 1 || !strings.Contains(out, "mcp down: unreachable") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// `gateway send` goes through the running gateway's admin API to the chat.
func TestSendCommandUsesTheAPI(t *testing.T) {
	g := startGateway(t, t.TempDir(), "")
	u := g.user("chat-s")
	code, out := cli(t, context.Background(), nil, "send", "--config", g.cfgPath, "--channel", "web", "--chat", "chat-s", "Backup", "done")
	if code != 0 || !strings.Contains(out, "sent") {
		t.Fatalf("`gateway send` = %d:\n%s", code, out)
	}
	if f := u.answer(); f[len(f)-1].Text != "Backup done" {
		t.Fatalf("the chat got %+v", f)
	}
	code, out = cli(t, context.Background(), nil, "send", "--config", g.cfgPath, "--channel", "nope", "--chat", "x", "hi")
	if code != 1 || !strings.Contains(out, `the gateway refused (HTTP 400): no channel "nope"`) {
		t.Fatalf("`gateway send` to an unknown channel = %d:\n%s", code, out)
	}
}
