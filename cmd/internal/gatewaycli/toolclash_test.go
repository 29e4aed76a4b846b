package gatewaycli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A hook tool named like a builtin tool that a profile lists would be shadowed by the
// builtin and never run. It is a load error naming both, as a clashing command is: check
// fails on it, hooks list shows it among what did not load, and a reload that brings it in
// is refused.
func TestHookToolNamedLikeAProfilesBuiltinToolIsALoadError(t *testing.T) {
	root := t.TempDir()
	hooksDir := filepath.Join(root, "hooks")
	prof := filepath.Join(root, "profiles")
	writeFile(t, filepath.Join(prof, "assistant", "profile.yaml"), "tools: [current_time]\n")
	clockYAML := "tools:\n  - {name: current_time, description: the time on the office clock}\ncommand: [./run.sh]\n"
	writeHook(t, hooksDir, "clock", clockYAML, "echo '{\"content\":\"office clock: 9:00\"}'\n")
	path := gatewayConfig(t, root, "127.0.0.1:1", "http://127.0.0.1:1/v1", "")
	ctx := context.Background()

	want := []string{"clock", "tool current_time", "builtin tool", `profile "assistant"`}
	code, out := cli(t, ctx, nil, "check", "--config", path)
	if code != 1 {
		t.Fatalf("check passed a hook tool the builtin shadows: exit %d:\n%s", code, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("check does not say %q:\n%s", w, out)
		}
	}
	code, out = cli(t, ctx, nil, "hooks", "list", "--config", path)
	_, notLoaded, _ := strings.Cut(out, "not loaded:")
	if code != 1 || notLoaded == "" {
		t.Fatalf("hooks list: exit %d, the clashing hook not among what did not load:\n%s", code, out)
	}
	for _, w := range want {
		if !strings.Contains(notLoaded, w) {
			t.Errorf("hooks list does not say %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "tool current_time\n") && strings.Contains(out, "commands and tools:") {
		t.Errorf("hooks list shows the shadowed tool as served:\n%s", out)
	}

	// A profile whose tools do not include it may have the hook's tool.
	writeFile(t, filepath.Join(prof, "assistant", "profile.yaml"), "description: no builtin tools\n")
	if code, out := cli(t, ctx, nil, "check", "--config", path); code != 0 {
		t.Fatalf("check refused a hook tool no builtin shadows: exit %d:\n%s", code, out)
	}
}

// A reload that would bring in a hook tool the builtin shadows is refused, saying why, and
// the running set stays.
func TestReloadRefusesAHookToolABuiltinShadows(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "profiles", "assistant", "profile.yaml"), "tools: [current_time]\n")
	g := startGateway(t, root, "")
	writeHook(t, filepath.Join(root, "hooks"), "clock",
		"tools:\n  - {name: current_time, description: the time on the office clock}\ncommand: [./run.sh]\n",
		"echo '{\"content\":\"office clock: 9:00\"}'\n")
	code, out := cli(t, context.Background(), nil, "reload", "--config", g.cfgPath)
	if code != 1 || !strings.Contains(out, "tool current_time clashes with the builtin tool current_time") {
		t.Fatalf("`gateway reload` = %d:\n%s\nwant exit 1 naming the clash", code, out)
	}
	g.user("chat-clock").ask("what time is it?")
	if tools := g.lastRequest().Tools; strings.Join(tools, ",") != "current_time" {
		t.Fatalf("the model was offered %q; want the builtin current_time alone", tools)
	}
}

// Two MCP servers of one name, the top-level one and a profile's, give their chats two tools
// of one name; the model gets one, and the log says so, naming both, once.
func TestTwoMCPServersOfOneNameAreLogged(t *testing.T) {
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: "ping", Description: "pong"}, func(ctx context.Context, r *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil, nil
		})
		return s
	}, nil))
	t.Cleanup(srv.Close) // after the gateway stops: it holds connections to the server
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "profiles", "assistant", "profile.yaml"), "mcp:\n  - {name: notes, url: \""+srv.URL+"\"}\n")
	g := startGateway(t, root, "mcp:\n  - {name: notes, url: \""+srv.URL+"\"}\n")
	g.waitLog("mcp server connected", 2)
	for _, chat := range []string{"chat-1", "chat-2"} {
		g.user(chat).ask("ping")
		if tools := g.lastRequest().Tools; strings.Join(tools, ",") != "notes__ping" {
			t.Fatalf("the model was offered %q; want notes__ping once", tools)
		}
	}
	recs := g.waitLog("two tools have the same name; the model gets only the first", 1)
	if len(recs) != 1 || recs[0]["tool"] != "notes__ping" || recs[0]["first"] != "a tool of MCP server notes" || recs[0]["dropped"] != "a tool of MCP server notes" {
		t.Fatalf("logged %v; want one record naming the tool and both servers", recs)
	}
}
