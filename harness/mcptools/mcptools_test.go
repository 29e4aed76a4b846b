package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"gateway/harness"
	"gateway/internal/childproc/childproctest"
	"gateway/internal/logbuf"
	"gateway/internal/secret"
)

// The test binary is also the stdio MCP server: run with GATEWAY_TEST_MCP=stdio it serves
// the test tools on stdin/stdout.
func TestMain(m *testing.M) {
	if os.Getenv("GATEWAY_TEST_MCP") == "stdio" {
		if err := testServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

type addIn struct {
	A int `json:"a" jsonschema:"the first number"`
	B int `json:"b" jsonschema:"the second number"`
}

// testServer is an MCP server written in Go: add (a sum), fail (an error result) and
// exit (ends the process, to test the supervisor).
func testServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "adds two numbers"}, func(ctx context.Context, r *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(in.A + in.B)}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "always fails"}, func(ctx context.Context, r *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
		return nil, nil, errors.New("it failed on purpose")
	})
	mcp.AddTool(s, &mcp.Tool{Name: "exit", Description: "ends the server process"}, func(ctx context.Context, r *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
		if os.Getenv("GATEWAY_TEST_MCP") == "stdio" {
			fmt.Fprintln(os.Stderr, "panic: the notes database is locked")
			os.Exit(3)
		}
		return nil, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "tells the value of an environment variable"}, func(ctx context.Context, r *mcp.CallToolRequest, in struct {
		Name string `json:"name"`
	}) (*mcp.CallToolResult, any, error) {
		v, ok := os.LookupEnv(in.Name)
		if !ok {
			v = "(unset)"
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: v}}}, nil, nil
	})
	return s
}

// HTTPServer serves the test tools over streamable HTTP.
func httpServer(t *testing.T) string {
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return testServer() }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

func stdioConfig(t *testing.T, name string) ServerConfig {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return ServerConfig{Name: name, Command: []string{exe, "-test.run=^$"}, Env: map[string]secret.Secret{"GATEWAY_TEST_MCP": "stdio"}}
}

func toolNames(ts []harness.Tool) string {
	var n []string
	for _, t := range ts {
		n = append(n, t.Def().Name)
	}
	return strings.Join(n, ",")
}

func waitTools(t *testing.T, m *Manager, server string, want string) []harness.Tool {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ts := m.Tools([]string{server})
		if toolNames(ts) == want {
			return ts
		}
		if time.Now().After(deadline) {
			t.Fatalf("tools of %s: %q, want %q", server, toolNames(ts), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func call(t *testing.T, ts []harness.Tool, name, args string) (string, error) {
	t.Helper()
	for _, x := range ts {
		if x.Def().Name == name {
			return x.Run(context.Background(), json.RawMessage(args))
		}
	}
	t.Fatalf("no tool %s", name)
	return "", nil
}

func TestStdioAndHTTPServers(t *testing.T) {
	m := Start([]ServerConfig{stdioConfig(t, "local"), {Name: "remote", URL: httpServer(t)}, {Name: "down", URL: "http://127.0.0.1:1/mcp"}},
		Options{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m.Wait(ctx)
	for _, srv := range []string{"local", "remote"} {
		ts := waitTools(t, m, srv, srv+"__add,"+srv+"__env,"+srv+"__exit,"+srv+"__fail")
		if !strings.Contains(string(ts[0].Def().Parameters), `"a"`) {
			t.Errorf("%s: schema %s", srv, ts[0].Def().Parameters)
		}
		if out, err := call(t, ts, srv+"__add", `{"a":2,"b":40}`); err != nil || out != "42" {
			t.Errorf("%s add: %q %v", srv, out, err)
		}
		_, err := call(t, ts, srv+"__fail", `{}`)
		var failed *harness.ToolFailed
		if !errors.As(err, &failed) || !strings.Contains(failed.Content, "on purpose") {
			t.Errorf("%s fail: %v", srv, err)
		}
	}
	if ts := m.Tools([]string{"down"}); len(ts) != 0 {
		t.Errorf("an unreachable server has tools %q", toolNames(ts))
	}
	// The stdio server dies: its tools go, then come back after the restart.
	ts := m.Tools([]string{"local"})
	call(t, ts, "local__exit", `{}`)
	if _, err := call(t, ts, "local__add", `{"a":1,"b":1}`); err == nil {
		t.Error("a call to the dead server succeeded")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ts := m.Tools([]string{"local"})
		if len(ts) > 0 {
			if out, err := call(t, ts, "local__add", `{"a":1,"b":1}`); err == nil && out == "2" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the stdio server was not restarted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCheckListsToolsAndNamesUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tools, errs := Check(ctx, []ServerConfig{stdioConfig(t, "local"), {Name: "down", URL: "http://127.0.0.1:1/mcp"}, {Name: "bad name!"}})
	if strings.Join(tools["local"], ",") != "add,env,exit,fail" {
		t.Errorf("tools %v", tools)
	}
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "mcp down: unreachable") || !strings.Contains(errs[1].Error(), "bad name!") {
		t.Errorf("errors %v", errs)
	}
}

// A stdio server gets a minimal environment and what its env: entry gives it: the gateway's
// own tokens and API keys do not reach the program unless the admin passes them there.
func TestStdioServerGetsNoSecretsOfTheGateway(t *testing.T) {
	t.Setenv("GATEWAY_CHANNELS_TELEGRAM_TOKEN", "123:telegram-secret")
	t.Setenv("OPENAI_API_KEY", "sk-gateway-secret")
	t.Setenv("LANG", "C.UTF-8")
	cfg := stdioConfig(t, "local")
	cfg.Env["SEARCH_API_KEY"] = "search-secret"
	m := Start([]ServerConfig{cfg}, Options{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	defer m.Close()
	ts := waitTools(t, m, "local", "local__add,local__env,local__exit,local__fail")
	for name, want := range map[string]string{
		"GATEWAY_CHANNELS_TELEGRAM_TOKEN": "(unset)",
		"OPENAI_API_KEY":                  "(unset)",
		"SEARCH_API_KEY":                  "search-secret",
		"LANG":                            "C.UTF-8",
		"PATH":                            os.Getenv("PATH"),
	} {
		if got, err := call(t, ts, "local__env", `{"name":"`+name+`"}`); err != nil || got != want {
			t.Errorf("%s in the server's environment: %q (%v), want %q", name, got, err, want)
		}
	}
}

// A stdio server started through a wrapper (npx, a shell script) leaves nothing running:
// neither after an attempt that failed (the supervisor makes one per backoff, forever) nor
// after the gateway closed a server that worked.
func TestStdioServerLeavesNoProcessBehind(t *testing.T) {
	dir := t.TempDir()
	wrapper := func(pidFile, then string) []string {
		return []string{"sh", "-c", "sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > " + pidFile + "; " + then}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	broken := ServerConfig{Name: "broken", Command: wrapper(dir+"/broken.pid", "echo not-json; sleep 1000")}
	if _, errs := Check(ctx, []ServerConfig{broken}); len(errs) != 1 {
		t.Fatalf("a server answering garbage passed: %v", errs)
	}
	childproctest.WaitGone(t, childproctest.WaitPID(t, dir+"/broken.pid"), "the child of a server that failed to start")

	cfg := stdioConfig(t, "local")
	exe := cfg.Command[0]
	cfg.Command = wrapper(dir+"/ok.pid", "exec "+exe+" -test.run=^$")
	m := Start([]ServerConfig{cfg}, Options{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	waitTools(t, m, "local", "local__add,local__env,local__exit,local__fail")
	pid := childproctest.WaitPID(t, dir+"/ok.pid")
	m.Close()
	childproctest.WaitGone(t, pid, "the child of a server the gateway closed")
}

// A stdio server that fails to start says why on stderr; the error quotes the end of it,
// beside the protocol error that alone says nothing to the admin ("invalid character 'g'"),
// and never more than a few KB of it however much it wrote. A secret of its env: is not quoted.
func TestStdioServerStderrExplainsItsFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	noisy := "i=0; while [ $i -lt 2000 ]; do echo \"debug line $i of the start-up noise\" >&2; i=$((i+1)); done; "
	_, errs := Check(ctx, []ServerConfig{
		{Name: "notes", Command: []string{"sh", "-c", "echo 'error: NOTES_DIR is not set' >&2; echo garbage"}},
		{Name: "noisy", Command: []string{"sh", "-c", noisy + "echo \"cannot open db with key $DB_KEY\" >&2; echo garbage"},
			Env: map[string]secret.Secret{"DB_KEY": "db-key-very-secret"}},
	})
	if len(errs) != 2 {
		t.Fatalf("errors %v; want one per server", errs)
	}
	if msg := errs[0].Error(); !strings.Contains(msg, "mcp notes: unreachable") || !strings.Contains(msg, "stderr: error: NOTES_DIR is not set") {
		t.Errorf("error %q; want it to quote the server's stderr", msg)
	}
	msg := errs[1].Error()
	if !strings.Contains(msg, "cannot open db with key") || strings.Contains(msg, "debug line 0 ") {
		t.Errorf("error %q; want the end of the server's stderr, not its start", msg)
	}
	if len(msg) > 5<<10 {
		t.Errorf("the error quotes %d bytes of stderr; want at most a few KB", len(msg))
	}
	if strings.Contains(msg, "db-key-very-secret") {
		t.Errorf("the error shows a secret the server was given: %q", msg)
	}
}

// A stdio server that dies says why on stderr: the supervisor's log quotes it.
func TestStdioServerStderrIsLoggedWhenItDies(t *testing.T) {
	var log logbuf.Buffer
	m := Start([]ServerConfig{stdioConfig(t, "local")}, Options{Logger: slog.New(slog.NewTextHandler(&log, nil)),
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	defer m.Close()
	ts := waitTools(t, m, "local", "local__add,local__env,local__exit,local__fail")
	call(t, ts, "local__exit", `{}`)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(log.String(), "mcp server went away") {
		if time.Now().After(deadline) {
			t.Fatalf("no log of the server's death:\n%s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "mcp server went away") && !strings.Contains(line, "the notes database is locked") {
			t.Fatalf("the log of the server's death does not quote its stderr: %s", line)
		}
	}
}

// A call that fails at the server (it died under the call) is logged with the server and
// the tool, not only told to the model.
func TestFailedCallIsLogged(t *testing.T) {
	var log logbuf.Buffer
	m := Start([]ServerConfig{stdioConfig(t, "local")}, Options{Logger: slog.New(slog.NewTextHandler(&log, nil)),
		MinBackoff: time.Hour, MaxBackoff: time.Hour})
	defer m.Close()
	ts := waitTools(t, m, "local", "local__add,local__env,local__exit,local__fail")
	if _, err := call(t, ts, "local__exit", `{}`); err == nil {
		t.Fatal("a call that ended the server's process succeeded")
	}
	logged := func(want string) bool {
		for _, line := range strings.Split(log.String(), "\n") {
			if strings.Contains(line, want) && strings.Contains(line, "server=local") {
				return true
			}
		}
		return false
	}
	if !logged("msg=\"mcp tool call failed\"") || !strings.Contains(log.String(), "tool=exit") {
		t.Fatalf("the failed call is not in the log:\n%s", log.String())
	}
	// Gone, and not restarted for an hour: a later call is refused, and that is logged too.
	deadline := time.Now().Add(20 * time.Second)
	for !logged("mcp tool call refused") {
		if time.Now().After(deadline) {
			t.Fatalf("a call to the dead server is not in the log:\n%s", log.String())
		}
		_, _ = call(t, ts, "local__add", `{"a":1,"b":1}`)
		time.Sleep(20 * time.Millisecond)
	}
}

// A token in a server's url (?token=, user:password@) was quoted in clear wherever the
// server could not be reached: in the log and in check's problems. check's printed config
// masked it; these did not.
func TestServerURLSecretsStayOutOfErrorsAndLog(t *testing.T) {
	const token, pass = "q-tok-5ecret", "pw-5ecret"
	secrets := func(s string) bool { return strings.Contains(s, token) || strings.Contains(s, pass) }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	down := ServerConfig{Name: "down", URL: "http://user:" + pass + "@127.0.0.1:1/mcp?token=" + token}
	if _, errs := Check(ctx, []ServerConfig{down}); len(errs) != 1 || secrets(errs[0].Error()) || !strings.Contains(errs[0].Error(), "mcp down: unreachable") {
		t.Errorf("check of an unreachable server: %v", errs)
	}

	var log logbuf.Buffer
	m := Start([]ServerConfig{down}, Options{Logger: slog.New(slog.NewTextHandler(&log, nil)), MinBackoff: time.Hour, MaxBackoff: time.Hour})
	defer m.Close()
	m.Wait(ctx)
	if secrets(log.String()) || !strings.Contains(log.String(), "mcp=down") {
		t.Errorf("the log quotes the url's secrets (or does not name the unreachable server):\n%s", log.String())
	}
}
