package gatewaycli

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"gateway/harness/openaitest"
)

// gateway check --connect reaches each MCP server and lists its tools; an unreachable one is
// a problem that names it, and a secret header is masked in the printed config. Plain check
// contacts none of them.
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
	code, out := cli(t, context.Background(), nil, "check", "--connect", "--config", path)
	if code != 0 || !strings.Contains(out, "mcp up: 1 tools: ping") || strings.Contains(out, "very-secret-value") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	path = writeConfig(t, "state_dir: STATE\nmcp:\n  - {name: down, url: \"http://127.0.0.1:1/mcp\"}\n  - {name: \"bad name\", command: [x]}\n")
	code, out = cli(t, context.Background(), nil, "check", "--connect", "--config", path)
	if code != 1 || !strings.Contains(out, "bad name") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	path = writeConfig(t, "state_dir: STATE\nmcp:\n  - {name: down, url: \"http://127.0.0.1:1/mcp\"}\n")
	code, out = cli(t, context.Background(), nil, "check", "--connect", "--config", path)
	if code != 1 || !strings.Contains(out, "mcp down: unreachable") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	// Without --connect the server that is down is not contacted, so not a problem.
	code, out = cli(t, context.Background(), nil, "check", "--config", path)
	if code != 0 || !strings.Contains(out, "mcp down: http://127.0.0.1:1/mcp, not contacted") {
		t.Fatalf("check without --connect: exit %d:\n%s", code, out)
	}
}

// gateway check does not run the admin's MCP programs: a stdio server is checked as written
// (its program exists and may be run) and started only with --connect.
func TestCheckStartsNoMCPProgram(t *testing.T) {
	t.Chdir(t.TempDir())
	// The "server" leaves a mark when started, and is no MCP server: --connect fails on it.
	if err := os.WriteFile("mcp-server.sh", []byte("#!/bin/sh\ntouch started\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("not-a-program.sh", []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(yaml string) {
		t.Helper()
		if err := os.WriteFile("gateway.yaml", []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("state_dir: ./data\nmcp:\n  - {name: files, command: [./mcp-server.sh]}\n")
	code, out := cli(t, context.Background(), nil, "check", "--config", "gateway.yaml")
	if code != 0 || !strings.Contains(out, "mcp files: command ./mcp-server.sh, not started") {
		t.Fatalf("check: exit %d:\n%s", code, out)
	}
	if _, err := os.Stat("started"); err == nil {
		t.Fatal("check started the MCP server's program")
	}
	code, out = cli(t, context.Background(), nil, "check", "--connect", "--config", "gateway.yaml")
	if _, err := os.Stat("started"); err != nil || code != 1 || !strings.Contains(out, "mcp files: unreachable") {
		t.Fatalf("check --connect: exit %d, started: %v:\n%s", code, err == nil, out)
	}
	for prog, want := range map[string]string{
		"no-such-mcp-server":  `mcp files: command "no-such-mcp-server": executable file not found in $PATH`,
		"./not-a-program.sh":  `mcp files: command "./not-a-program.sh": permission denied`,
		"./no-such-server.sh": `mcp files: command "./no-such-server.sh": no such file or directory`,
	} {
		write("state_dir: ./data\nmcp:\n  - {name: files, command: [" + prog + "]}\n")
		if code, out := cli(t, context.Background(), nil, "check", "--config", "gateway.yaml"); code != 1 || !strings.Contains(out, want) {
			t.Errorf("check with command %s: exit %d, want 1 and %q:\n%s", prog, code, want, out)
		}
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

// `gateway send` and `gateway reload` read only the http and admin sections: a cron job that
// sets the admin token's variable alone is not refused for a platform token's ${VAR} it
// does not need. A problem in what they do use is still reported.
func TestSendNeedsOnlyTheVariablesItUses(t *testing.T) {
	g := startGateway(t, t.TempDir(), "")
	u := g.user("chat-v")
	base, err := os.ReadFile(g.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	client := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(client, append(base, []byte("channels:\n  telegram:\n    enabled: true\n    token: ${TGTOKEN}\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := cli(t, context.Background(), nil, "send", "--config", client, "--channel", "web", "--chat", "chat-v", "nightly", "backup")
	if code != 0 || !strings.Contains(out, "sent") {
		t.Fatalf("`gateway send` with a variable it does not use unset = %d:\n%s", code, out)
	}
	if f := u.answer(); f[len(f)-1].Text != "nightly backup" {
		t.Fatalf("the chat got %+v", f)
	}
	if err := os.WriteFile(client, append(base, []byte("admin:\n  token: ${ADMIN_TOKEN}\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out = cli(t, context.Background(), nil, "send", "--config", client, "--channel", "web", "--chat", "chat-v", "hi")
	if code != 1 || !strings.Contains(out, "ADMIN_TOKEN") {
		t.Fatalf("`gateway send` with the admin token's variable unset = %d; want 1 naming it:\n%s", code, out)
	}
}

// An MCP server may name its tools in ways the model APIs refuse ("notes.read", or longer
// than 64 characters with the server's prefix); OpenAI then refuses the whole request. Such
// a tool reaches the model under a name it accepts, the call reaches the right tool, and
// the chat is answered.
func TestMCPToolNamesTheModelCannotTakeStillWork(t *testing.T) {
	long := "list_every_pull_request_review_comment_of_the_repository_in_order"
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
		for _, name := range []string{"notes.read", long} {
			mcp.AddTool(s, &mcp.Tool{Name: name, Description: name}, func(ctx context.Context, r *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran " + name}}}, nil, nil
			})
		}
		return s
	}, nil))
	t.Cleanup(srv.Close) // after the gateway stops: it holds a connection to the server
	root := t.TempDir()
	g := startGateway(t, root, "mcp:\n  - {name: notes, url: \""+srv.URL+"\"}\n")
	// The model calls each tool it was offered once, then says what the tools answered.
	g.oai.SetFunc(func(r openaitest.Request) openaitest.Reply {
		var results []string
		for _, m := range r.Messages {
			if m.Role == "tool" {
				results = append(results, m.Content)
			}
		}
		if len(results) > 0 {
			return openaitest.Reply{Text: strings.Join(results, "; ")}
		}
		var calls []openaitest.ToolCall
		for i, name := range r.Tools {
			calls = append(calls, openaitest.ToolCall{ID: fmt.Sprintf("call_%d", i), Name: name, Arguments: "{}"})
		}
		return openaitest.Reply{ToolCalls: calls}
	})
	// The tools are there once the server is connected (the gateway does not wait for it).
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(g.log.String(), "mcp server connected") {
		if time.Now().After(deadline) {
			t.Fatalf("the MCP server did not connect; log:\n%s", g.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var got []string
	for _, f := range g.user("mcp-names").ask("read my notes") {
		if f.Type == "error" {
			t.Fatalf("the chat got an error: %s", f.Text)
		}
		got = append(got, f.Text)
	}
	answer := strings.Join(got, "")
	if !strings.Contains(answer, "ran notes.read") || !strings.Contains(answer, "ran "+long) {
		t.Fatalf("the answer %q does not carry both tools' results", answer)
	}
}

// gateway check --connect on a stdio server that cannot start shows what the server said on
// stderr, not only the protocol error its garbage on stdout caused.
func TestCheckConnectQuotesTheServersStderr(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("mcp-server.sh", []byte("#!/bin/sh\necho 'usage: mcp-server --root DIR' >&2\necho 'give the folder to serve' >&2\necho garbage\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("gateway.yaml", []byte("state_dir: ./data\nmcp:\n  - {name: files, command: [./mcp-server.sh]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := cli(t, context.Background(), nil, "check", "--connect", "--config", "gateway.yaml")
	if code != 1 || !strings.Contains(out, "mcp files: unreachable") ||
		!strings.Contains(out, "stderr: usage: mcp-server --root DIR | give the folder to serve") {
		t.Fatalf("check --connect: exit %d:\n%s", code, out)
	}
}
