package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"gateway/harness"
	"gateway/harness/mcptools"
	"gateway/harness/openaitest"
	"gateway/internal/secret"
)

type wordsIn struct {
	Text string `json:"text" jsonschema:"the text to count"`
}

// mcpServer is an MCP server written in Go with one tool, count_words.
func mcpServer(flavour string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "words", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "count_words", Description: "counts the words of a text"}, func(ctx context.Context, r *mcp.CallToolRequest, in wordsIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%d words (%s)", len(strings.Fields(in.Text)), flavour)}}}, nil, nil
	})
	return s
}

func serveMCPStdio() int {
	if err := mcpServer("stdio").Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

// The fake model calls the tools of two MCP servers written in Go (stdio and streamable
// HTTP), named <server>__<tool>; each result is in the next request.
func TestMCPToolsEndToEnd(t *testing.T) {
	httpSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return mcpServer("http") }, nil))
	t.Cleanup(httpSrv.Close)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := mcptools.Start([]mcptools.ServerConfig{
		{Name: "local", Command: []string{exe, "-test.run=^$"}, Env: map[string]secret.Secret{"GATEWAY_TEST_MCP": "stdio"}},
		{Name: "remote", URL: httpSrv.URL},
		{Name: "gone", URL: "http://127.0.0.1:1/mcp"},
	}, mcptools.Options{MinBackoff: time.Second})
	t.Cleanup(m.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m.Wait(ctx)

	model := openaitest.NewServer()
	t.Cleanup(model.Close)
	model.SetFunc(func(r openaitest.Request) openaitest.Reply {
		last := r.Messages[len(r.Messages)-1]
		if last.Role == "tool" {
			return openaitest.Reply{Text: "tool: " + last.Content}
		}
		return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "c1", Name: last.Content + "__count_words", Arguments: `{"text":"one two three"}`}}}
	})
	e := newEnv(t, withProvider(model), func(c *Config, rt *Runtime, d *Deps) {
		rt.MCPTools = func(string) []harness.Tool { return m.Tools(nil) }
	})
	for _, srv := range []string{"local", "remote"} {
		want := "done:tool: 3 words (stdio)"
		if srv == "remote" {
			want = "done:tool: 3 words (http)"
		}
		if got := e.say(t, "mcp-"+srv, "m1", srv); got != want {
			t.Fatalf("%s: %q, want %q", srv, got, want)
		}
		reqs := model.Requests()
		tools := strings.Join(reqs[len(reqs)-1].Tools, ",")
		if tools != "local__count_words,remote__count_words" {
			t.Fatalf("the model saw tools %q (the unreachable server has none)", tools)
		}
	}
	// The admin sees them too: /api/v1/status lists the tools of the servers that are up.
	var listed []string
	for _, tool := range getStatus(t, e.url)["tools"].([]any) {
		if m := tool.(map[string]any); m["source"] == "mcp" {
			listed = append(listed, m["name"].(string))
		}
	}
	if got := strings.Join(listed, ","); got != "local__count_words,remote__count_words" {
		t.Fatalf("/api/v1/status lists the MCP tools %q; want those of the servers that are up, once each", got)
	}
}
