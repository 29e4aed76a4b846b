package hooks

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A command or tool name taken twice is a load error naming both sources; the hook that
// clashed does not load at all.
func TestRegistryClashNamesBothSources(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "a-first", "commands: [{name: pop, description: go back}]\ncommand: [./run.sh]\n", "exit 0\n")
	writeHook(t, root, "b-second", "events: [message:receive]\ncommands: [{name: pop, description: also}]\ncommand: [./run.sh]\n", "exit 0\n")
	writeHook(t, root, "c-builtin", "commands: [{name: status, description: mine}]\ncommand: [./run.sh]\n", "exit 0\n")
	b := newTestBus(t, 5*time.Second)
	reg := NewRegistry([]RegisteredCommand{{Name: "status", Description: "builtin"}})
	d := LoadDir(b.Bus, root, DirOptions{Source: "dir:x", Registry: reg})
	t.Cleanup(d.Close)
	errs := d.Errors()
	if len(errs) != 2 {
		t.Fatalf("errors %v", errs)
	}
	if msg := errs[0].Error(); !strings.Contains(msg, "dir:x/a-first") || !strings.Contains(msg, "dir:x/b-second") || !strings.Contains(msg, "/pop") {
		t.Errorf("clash error %q", msg)
	}
	if msg := errs[1].Error(); !strings.Contains(msg, "builtin") || !strings.Contains(msg, "dir:x/c-builtin") {
		t.Errorf("builtin clash error %q", msg)
	}
	if len(b.Handlers()) != 0 {
		t.Errorf("the clashing hook registered handlers: %+v", b.Handlers())
	}
	if c, ok := reg.Command("pop", ""); !ok || c.Source != "dir:x/a-first" {
		t.Errorf("pop = %+v, %v", c, ok)
	}
	// What loaded is what runs: a hook that clashed is among the errors only.
	if h := d.Hooks(); len(h) != 1 || h[0].Source != "dir:x/a-first" {
		t.Errorf("loaded hooks = %+v; want only dir:x/a-first", h)
	}
}

// A hook tool that chats would also get from a profile's builtin tools or from an MCP server
// ("<server>__<tool>") is a load error that says so; one whose chats have neither loads.
func TestToolClashWithBuiltinOrMCPIsALoadError(t *testing.T) {
	root := t.TempDir()
	tool := func(name string) string {
		return "tools: [{name: " + name + ", description: x}]\ncommand: [./run.sh]\n"
	}
	writeHook(t, root, "a-clock", tool("current_time"), "exit 0\n")
	writeHook(t, root, "b-files", tool("files__read"), "exit 0\n")
	writeHook(t, root, "c-notes", tool("notes__read"), "exit 0\n")
	b := newTestBus(t, 5*time.Second)
	reg := NewRegistry(nil)
	reg.ReserveBuiltinTools("assistant", []string{"current_time"})
	reg.ReserveMCPServer("", "files")
	reg.ReserveMCPServer("other", "notes")
	d := LoadDir(b.Bus, root, DirOptions{Source: "dir:x", Registry: reg, Profile: "assistant"})
	t.Cleanup(d.Close)
	errs := d.Errors()
	if len(errs) != 2 {
		t.Fatalf("errors %v; want the clock and the files hooks", errs)
	}
	for i, want := range []string{
		`tool current_time clashes with the builtin tool current_time that profile "assistant" lists in its tools`,
		"tool files__read clashes with the tools of MCP server files (the top-level mcp:), which reach the model as files__<tool>",
	} {
		if !strings.Contains(errs[i].Error(), want) {
			t.Errorf("error %q; want %q", errs[i], want)
		}
	}
	if tools := reg.Tools("assistant"); len(tools) != 1 || tools[0].Name != "notes__read" {
		t.Errorf("tools of assistant %+v; want notes__read alone (the server notes is another profile's)", tools)
	}
	// Another profile's hook may name a tool current_time: its chats have no such builtin.
	reg2 := NewRegistry(nil)
	reg2.ReserveBuiltinTools("assistant", []string{"current_time"})
	d2 := LoadDir(b.Bus, root, DirOptions{Source: "dir:z", Registry: reg2, Profile: "other"})
	t.Cleanup(d2.Close)
	if errs := d2.Errors(); len(errs) != 0 {
		t.Errorf("another profile's hooks did not load: %v", errs)
	}
}

// A declared command runs the program with the command event; its result decodes.
func TestDeclaredCommandAndTool(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "x", `commands: [{name: hi, description: say hi}]
tools:
  - name: echo_args
    description: echoes
    parameters: {type: object, properties: {q: {type: string}}}
    timeout: 2s
command: [./run.sh]
`, `read ev
case "$ev" in
*'"type":"command"'*) echo '{"text":"hi there","entries":[{"type":"mark","n":1}]}' ;;
*'"type":"tool"'*) echo '{"content":"got it","is_error":false}' ;;
esac
`)
	b := newTestBus(t, 5*time.Second)
	reg := NewRegistry(nil)
	loadOne(t, b, root, DirOptions{Registry: reg, Profile: "p1"})
	if _, ok := reg.Command("hi", "other"); ok {
		t.Error("a profile's command is seen by another profile")
	}
	c, ok := reg.Command("hi", "p1")
	if !ok {
		t.Fatal("no command hi")
	}
	res, err := c.Run(ctxT(t), &Command{Name: "hi", Args: []string{}, Entries: []json.RawMessage{}})
	if err != nil || res.Text != "hi there" || len(res.Entries) != 1 {
		t.Fatalf("command: %+v, %v", res, err)
	}
	tools := reg.Tools("p1")
	if len(tools) != 1 || tools[0].Timeout != 2*time.Second || !strings.Contains(string(tools[0].Parameters), `"q"`) {
		t.Fatalf("tools %+v", tools)
	}
	out, err := tools[0].Run(ctxT(t), &Tool{Name: "echo_args", ToolCallID: "c1", Arguments: json.RawMessage(`{"q":"x"}`)})
	if err != nil || out.Content != "got it" {
		t.Fatalf("tool: %+v, %v", out, err)
	}
}

func TestCommandResultEntriesValidated(t *testing.T) {
	for _, bad := range []string{`{"entries":[{"type":"message"}]}`, `{"entries":[{"x":1}]}`, `{"entries":[3]}`} {
		if _, err := DecodeResult(NameCommand, []byte(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
	if _, err := DecodeResult(NameCommand, []byte(`{"entries":[{"type":"stack_pop"}]}`)); err != nil {
		t.Error(err)
	}
}

func TestHookYAMLDeclarationErrors(t *testing.T) {
	for yaml, want := range map[string]string{
		"commands: [{name: Pop, description: x}]\ncommand: [./run.sh]\n":                                                            "lowercase",
		"commands: [{name: pop}]\ncommand: [./run.sh]\n":                                                                            "commands[0].description: missing",
		"commands: [{name: go-back, description: x}]\ncommand: [./run.sh]\n":                                                        "commands[0].name",
		"commands: [{name: a23456789012345678901234567890123, description: x}]\ncommand: [./run.sh]\n":                              "commands[0].name",
		"tools: [{name: get.weather, description: x}]\ncommand: [./run.sh]\n":                                                       "tools[0].name",
		"tools: [{name: '', description: x}]\ncommand: [./run.sh]\n":                                                                "tools[0].name",
		"tools: [{name: a2345678901234567890123456789012345678901234567890123456789012345, description: x}]\ncommand: [./run.sh]\n": "tools[0].name",
		"commands: [{name: pop, description: x, extra: 1}]\ncommand: [./run.sh]\n":                                                  "commands[0].extra: unknown key",
		"tools: [{name: t, description: x, timeout: soon}]\ncommand: [./run.sh]\n":                                                  `"soon" is not a duration`,
		"events: [command]\ncommand: [./run.sh]\n":                                                                                  "declare the hook's commands under commands:",
		// Providers refuse every request that carries such a tool: each chat that has it would fail.
		"tools: [{name: t, description: x, parameters: {type: string}}]\ncommand: [./run.sh]\n":     `tools[0].parameters.type: "string": a tool's parameters are an object`,
		"tools: [{name: t, description: x, parameters: {properties: [id]}}]\ncommand: [./run.sh]\n": "tools[0].parameters.properties: want a mapping",
		"tools: [{name: t, description: x, parameters: {required: id}}]\ncommand: [./run.sh]\n":     "tools[0].parameters.required: want a list",
	} {
		root := t.TempDir()
		writeHook(t, root, "h", yaml, "exit 0\n")
		_, errs := scanDir(root, "dir:x", nil)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), want) {
			t.Errorf("%q: errors %v, want %q", yaml, errs, want)
		}
	}
}

// A hook that observes every event ("*") and also declares a command and a tool: its answers
// to them are the command's reply and the tool's result, not ignored like an observation's.
func TestObserverHookStillAnswersItsCommandsAndTools(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "watch", `events: ["*"]
commands: [{name: stats, description: show stats}]
tools: [{name: count_events, description: counts}]
command: [./run.sh]
`, `read ev
case "$ev" in
*'"type":"command"'*) echo '{"text":"42 events"}' ;;
*'"type":"tool"'*) echo '{"content":"42"}' ;;
*) echo '{"ignored":true}' ;;
esac
`)
	b := newTestBus(t, 5*time.Second)
	reg := NewRegistry(nil)
	loadOne(t, b, root, DirOptions{Registry: reg})
	c, ok := reg.Command("stats", "")
	if !ok {
		t.Fatal("no command stats")
	}
	res, err := c.Run(ctxT(t), &Command{Name: "stats", Args: []string{}, Entries: []json.RawMessage{}})
	if err != nil || res.Text != "42 events" {
		t.Fatalf("/stats answered %+v, %v; want the hook's text", res, err)
	}
	tools := reg.Tools("")
	if len(tools) != 1 {
		t.Fatalf("tools %+v", tools)
	}
	out, err := tools[0].Run(ctxT(t), &Tool{Name: "count_events", ToolCallID: "c1", Arguments: json.RawMessage(`{}`)})
	if err != nil || out.Content != "42" {
		t.Fatalf("tool answered %+v, %v; want the hook's content", out, err)
	}
	// As an observer its output is still ignored, never decoded as a result.
	b.Emit(ctxT(t), &MessageEnd{})
	if fs := b.Failures(); len(fs) != 0 {
		t.Fatalf("the observer's output was read: %+v", fs)
	}
}

// A hook's tool or command that fails is a hook failure like any other: logged with its
// source (a tool's error otherwise reaches only the model) and counted. One the caller
// stopped is not the hook's fault.
func TestFailedHookToolAndCommandAreLoggedAndCounted(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "broken", `commands: [{name: slow, description: sleeps}]
tools: [{name: lookup, description: crashes}]
command: [./run.sh]
timeout: 300ms
`, `read ev
case "$ev" in
*'"type":"tool"'*) echo "lookup: database unreachable" >&2; exit 3 ;;
*) exec sleep 30 ;;
esac
`)
	b := newTestBus(t, 5*time.Second)
	reg := NewRegistry(nil)
	loadOne(t, b, root, DirOptions{Source: "dir:x", Registry: reg})
	tools := reg.Tools("")
	if len(tools) != 1 {
		t.Fatalf("tools %+v", tools)
	}
	_, err := tools[0].Run(ctxT(t), &Tool{Session: Session{SessionKey: "web:c1"}, Name: "lookup", ToolCallID: "c1", Arguments: json.RawMessage(`{}`)})
	if err == nil {
		t.Fatal("the crashing tool succeeded")
	}
	// What may be shown outside says what happened, never what the program wrote to stderr.
	if r := FailureReason(err); r != "its program exited with status 3" {
		t.Errorf("the failure's plain words are %q", r)
	}
	f := b.onlyFailure(t, "dir:x/broken", "exited with code 3", "database unreachable")
	if f.event != NameTool {
		t.Errorf("failure event %q; want %q", f.event, NameTool)
	}
	if logged := b.log.String(); !strings.Contains(logged, "tool=lookup") || !strings.Contains(logged, "session=web:c1") {
		t.Errorf("the log does not name the tool and chat:\n%s", logged)
	}

	c, _ := reg.Command("slow", "")
	stopped, stop := context.WithCancel(ctxT(t))
	stop()
	if _, err := c.Run(stopped, &Command{Name: "slow", Args: []string{}, Entries: []json.RawMessage{}}); err == nil {
		t.Fatal("a stopped command succeeded")
	}
	if n := len(b.Failures()); n != 1 {
		t.Fatalf("a command the user stopped was counted as the hook's failure: %+v", b.Failures())
	}
	if _, err := c.Run(ctxT(t), &Command{Name: "slow", Args: []string{}, Entries: []json.RawMessage{}}); err == nil {
		t.Fatal("the command that outlived its timeout succeeded")
	}
	if fs := b.Failures(); len(fs) != 2 || fs[1].event != NameCommand || fs[1].source != "dir:x/broken" {
		t.Fatalf("the timed-out command was not counted: %+v", fs)
	}
}

// A tool without a timeout of its own is bounded by its hook's timeout, and says so: the
// harness bounds a tool by the timeout it reports (30s when none), which would otherwise
// cut a slow tool of a hook given "timeout: 45s" at 30s.
func TestToolWithoutItsOwnTimeoutReportsTheHooks(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "slow", "timeout: 45s\ntools: [{name: slow, description: slow}, {name: quick, description: quick, timeout: 2s}]\ncommand: [./run.sh]\n", "exit 0\n")
	b := newTestBus(t, 10*time.Second)
	reg := NewRegistry(nil)
	loadOne(t, b, root, DirOptions{Registry: reg})
	got := map[string]time.Duration{}
	for _, tool := range reg.Tools("") {
		got[tool.Name] = tool.Timeout
	}
	if got["slow"] != 45*time.Second || got["quick"] != 2*time.Second {
		t.Fatalf("tool timeouts = %v; want slow 45s (the hook's), quick 2s (its own)", got)
	}
}

// The log line of a hook that only adds a command and a tool names them, so the admin sees
// what it added (its events are none).
func TestLoadedHookLogNamesCommandsAndTools(t *testing.T) {
	root := t.TempDir()
	writeHook(t, root, "calc", "commands: [{name: sum, description: adds}]\ntools: [{name: calc, description: computes}]\ncommand: [./run.sh]\n", "exit 0\n")
	b := newTestBus(t, 10*time.Second)
	d := loadOne(t, b, root, DirOptions{Registry: NewRegistry(nil)})
	LogLoaded(slog.New(slog.NewTextHandler(&b.log, nil)), d.Hooks())
	if got := b.log.String(); !strings.Contains(got, "commands=[/sum]") || !strings.Contains(got, "tools=[calc]") {
		t.Errorf("log does not name the command and the tool:\n%s", got)
	}
}
