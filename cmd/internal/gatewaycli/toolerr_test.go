package gatewaycli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"gateway/harness/openaitest"
)

// toolCaller is a model that calls the tool the user names ("call NAME") and then repeats
// what the tool answered, so the test sees what reached it.
func toolCaller(r openaitest.Request) openaitest.Reply {
	last := r.Messages[len(r.Messages)-1]
	if last.Role == "tool" {
		return openaitest.Reply{Text: "the tool said: " + last.Content}
	}
	name := strings.TrimPrefix(lastUser(r), "call ")
	return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "call_" + name, Name: name, Arguments: `{}`}}}
}

// A hook tool's program that fails says why on stderr, which is the admin's: it may hold
// paths, environment dumps, tokens. Whatever the failure (an exit status, a crash, a
// timeout, an answer that is not a tool result, a URL's error page), the model — an outside
// provider — and the chat get a plain text naming the tool and what happened; the log has
// the stderr, and the failure is counted. A hook that answers an error result on purpose
// still gives the model its own words.
func TestHookToolFailureKeepsStderrFromTheModel(t *testing.T) {
	const secret = "sk-live-4f9a2c7e81d3" // stands for whatever the admin's program printed
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Traceback: db login failed with password "+secret, http.StatusInternalServerError)
	}))
	t.Cleanup(page.Close)

	root := t.TempDir()
	hooksDir := filepath.Join(root, "hooks")
	tool := func(name, extra string) string {
		return "tools:\n  - {name: " + name + ", description: looks up an order}\n" + extra
	}
	leak := "cat >/dev/null\necho \"connecting with OPENAI_API_KEY=" + secret + "\" >&2\n"
	writeHook(t, hooksDir, "exits", tool("exits_badly", "command: [./run.sh]\n"), leak+"exit 3\n")
	writeHook(t, hooksDir, "crashes", tool("crashes", "command: [./run.sh]\n"), leak+"kill -SEGV $$\n")
	writeHook(t, hooksDir, "hangs", tool("hangs", "command: [./run.sh]\ntimeout: 1s\n"), leak+"exec sleep 60\n")
	writeHook(t, hooksDir, "garbles", tool("garbles", "command: [./run.sh]\n"), leak+"echo \"DEBUG env: TOKEN="+secret+"\"\n")
	writeHook(t, hooksDir, "remote", tool("remote", "url: "+page.URL+"\n"), "")
	writeHook(t, hooksDir, "says", tool("says_no", "command: [./run.sh]\n"),
		"cat >/dev/null\necho '{\"content\":\"no order A-99\",\"is_error\":true}'\n")
	g := startGateway(t, root, "")
	g.oai.SetFunc(toolCaller)

	cases := []struct {
		hook, tool, told string // told: what the model must be told
		logged           string // what the log record's err must hold besides the tool's name
	}{
		{"exits", "exits_badly", "error: the tool exits_badly failed: its program exited with status 3", secret},
		{"crashes", "crashes", "error: the tool crashes failed: its program crashed (signal: segmentation fault)", secret},
		{"hangs", "hangs", "error: the tool hangs failed: its program timed out", secret},
		{"garbles", "garbles", "error: the tool garbles failed: its answer is not a valid tool result", "DEBUG env"},
		{"remote", "remote", "error: the tool remote failed: its URL answered 500 Internal Server Error", secret},
		{"says", "says_no", "no order A-99", ""},
	}
	for _, c := range cases {
		u := g.user("chat-" + c.hook)
		answer := u.ask("call " + c.tool)
		if last := answer[len(answer)-1]; last.Type != "done" || last.Text != "the tool said: "+c.told {
			t.Errorf("%s: the chat got %+v; want the model to have been told %q", c.tool, last, c.told)
		}
		for _, f := range answer {
			if strings.Contains(fmt.Sprint(f), secret) || f.Tool != nil && strings.Contains(f.Tool.Summary, secret) {
				t.Errorf("%s: the chat was shown the program's stderr: %+v", c.tool, f)
			}
		}
	}
	for _, r := range g.oai.Requests() {
		if strings.Contains(string(r.Body), secret) || strings.Contains(string(r.Body), "DEBUG env") {
			t.Errorf("a request to the model carries what the hook wrote for the admin:\n%s", r.Body)
		}
	}

	recs := g.waitLog("hook tool failed; the model was told", len(cases)-1)
	for _, c := range cases[:len(cases)-1] {
		source := "dir:" + hooksDir + "/" + c.hook
		found := false
		for _, r := range recs {
			found = found || r["source"] == source && r["tool"] == c.tool && strings.Contains(fmt.Sprint(r["err"]), c.logged)
		}
		if !found {
			t.Errorf("%s: no log record with %q; records: %v", c.tool, c.logged, recs)
		}
		if n := g.hookErrors(source, "tool"); n != 1 {
			t.Errorf("gateway_hook_errors_total{source=%q,event=tool} = %v; want 1", source, n)
		}
	}
}

// A hook command's program that fails is told to the chat in plain words; what it wrote to
// stderr is the admin's, in the log, and the failure is counted.
func TestHookCommandFailureKeepsStderrFromTheChat(t *testing.T) {
	const secret = "sk-live-4f9a2c7e81d3"
	root := t.TempDir()
	hooksDir := filepath.Join(root, "hooks")
	writeHook(t, hooksDir, "orders", "commands:\n  - {name: orders, description: lists the open orders}\ncommand: [./run.sh]\n",
		"cat >/dev/null\necho \"connecting with OPENAI_API_KEY="+secret+"\" >&2\nexit 3\n")
	g := startGateway(t, root, "")
	answer := g.user("chat-orders").ask("/orders")
	if last := answer[len(answer)-1]; last.Type != "error" || last.Text != "The command /orders failed." {
		t.Errorf("the chat got %+v; want a plain error", last)
	}
	for _, f := range answer {
		if strings.Contains(fmt.Sprint(f), secret) {
			t.Errorf("the chat was shown the program's stderr: %+v", f)
		}
	}
	if n := len(g.oai.Requests()); n != 0 {
		t.Errorf("the failed command reached the model (%d requests)", n)
	}
	recs := g.waitLog("hook command failed", 1)
	if err := fmt.Sprint(recs[0]["err"]); !strings.Contains(err, "exited with code 3") || !strings.Contains(err, secret) {
		t.Errorf("the log record does not hold the program's stderr: %v", recs[0])
	}
	if n := g.hookErrors("dir:"+hooksDir+"/orders", "command"); n != 1 {
		t.Errorf("gateway_hook_errors_total{event=command} = %v; want 1", n)
	}
}

// mcpServerEnv makes the test binary a stdio MCP server (see serveTestMCP).
const mcpServerEnv = "GATEWAYCLI_TEST_AS_MCP_SERVER"

// serveTestMCP serves two tools on stdin/stdout and exits: crash (says why on stderr and
// dies) and refuse (answers an error result of its own).
func serveTestMCP() {
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "dies"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		fmt.Fprintln(os.Stderr, "panic: cannot open /srv/notes.db with OPENAI_API_KEY="+mcpSecret)
		os.Exit(3)
		return nil, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "refuse", Description: "refuses"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return nil, nil, errors.New("no notes match that query")
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

const mcpSecret = "sk-live-77c1e0b95a"

// A stdio MCP server that dies mid-call says why on stderr: the log quotes it, the model (an
// outside provider) and the chat do not. An error the server answers itself reaches the
// model: it is the server's answer.
func TestMCPServerStderrStaysOutOfTheModel(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	g := startGateway(t, root, fmt.Sprintf("mcp:\n  - {name: notes, command: [%q, \"-test.run=^$\"], env: {%s: \"1\"}}\n", exe, mcpServerEnv))
	g.oai.SetFunc(toolCaller)
	g.waitLog("mcp server connected", 1)

	u := g.user("chat-mcp")
	answer := u.ask("call notes__crash")
	for _, f := range answer {
		if strings.Contains(fmt.Sprint(f), mcpSecret) || f.Tool != nil && strings.Contains(f.Tool.Summary, mcpSecret) {
			t.Errorf("the chat was shown the server's stderr: %+v", f)
		}
	}
	if last := answer[len(answer)-1]; last.Type != "done" || !strings.Contains(last.Text, "the tool said: error: MCP server notes") {
		t.Errorf("the chat got %+v; want the model told that the server failed", last)
	}
	recs := g.waitLog("mcp server went away; restarting it", 1)
	if err := fmt.Sprint(recs[0]["err"]); !strings.Contains(err, mcpSecret) {
		t.Errorf("the log does not quote the server's stderr: %v", recs[0])
	}

	g.waitLog("mcp server connected", 2) // restarted
	answer = u.ask("call notes__refuse")
	if last := answer[len(answer)-1]; last.Text != "the tool said: no notes match that query" {
		t.Errorf("the chat got %+v; want the server's own error to have reached the model", last)
	}
	for _, r := range g.oai.Requests() {
		if strings.Contains(string(r.Body), mcpSecret) || strings.Contains(string(r.Body), "/srv/notes.db") {
			t.Errorf("a request to the model carries the server's stderr:\n%s", r.Body)
		}
	}
}
