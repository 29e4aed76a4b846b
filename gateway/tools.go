package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"gateway/harness"
	"gateway/hooks"
	"gateway/internal/llm"
)

// hookTool is a tool a hook declared in HOOK.yaml, as the harness runs it: the call goes
// to the hook's program as a tool event.
type hookTool struct{ t hooks.RegisteredTool }

func (h hookTool) Def() llm.ToolDef {
	return llm.ToolDef{Name: h.t.Name, Description: h.t.Description, Parameters: h.t.Parameters}
}

// Timeout is the bound of one call from HOOK.yaml (the tool's own, else its hook's) and a
// second more: the hook's own limit, which ends the same call, comes first with its words
// for the model ("its program timed out") rather than racing the harness's.
func (h hookTool) Timeout() time.Duration {
	if h.t.Timeout <= 0 {
		return 0
	}
	return h.t.Timeout + time.Second
}

func (h hookTool) Run(ctx context.Context, args json.RawMessage) (string, error) {
	call, _ := harness.CallInfo(ctx)
	out, err := h.t.Run(ctx, &hooks.Tool{Session: call.Session, Name: h.t.Name, ToolCallID: call.ID, Arguments: args})
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err() // stopped, or past the harness's limit: it says which
		}
		// err quotes the program's stderr, the admin's (logged and counted where the call
		// failed); the model, an outside provider, and the chat get plain words.
		return "", &harness.ToolFailed{Content: fmt.Sprintf("error: the tool %s failed: %s", h.t.Name, hooks.FailureReason(err))}
	}
	if out.IsError {
		return "", &harness.ToolFailed{Content: out.Content}
	}
	return out.Content, nil
}

// sessionTools are the tools a session of the profile has: the builtins it names, then
// those its hooks declare, then the MCP servers' that are up (the first of a name wins).
// The hook directories' loader refuses a hook tool that clashes with a builtin or an MCP
// server's; a clash left (two MCP servers of one name, one top-level and one a profile's)
// is logged once per runtime, naming both, rather than dropped in silence.
func sessionTools(rt *Runtime, log *slog.Logger, profileName string, names []string) ([]harness.Tool, error) {
	var tools []harness.Tool
	if rt.Tools != nil && len(names) > 0 {
		var err error
		if tools, err = rt.Tools(names); err != nil {
			return nil, err
		}
	}
	taken := map[string]string{} // tool name → what gave it, in words
	for _, t := range tools {
		taken[t.Def().Name] = "the builtin tool"
	}
	add := func(t harness.Tool, from string) {
		name := t.Def().Name
		if first, ok := taken[name]; ok {
			if rt.firstClash(profileName, name) {
				log.Warn("two tools have the same name; the model gets only the first", "tool", name,
					"profile", profileName, "first", first, "dropped", from)
			}
			return
		}
		taken[name] = from
		tools = append(tools, t)
	}
	for _, t := range rt.Commands.Tools(profileName) {
		add(hookTool{t}, "the tool of hook "+t.Source)
	}
	if rt.MCPTools != nil {
		for _, t := range rt.MCPTools(profileName) {
			server, _, _ := strings.Cut(t.Def().Name, "__")
			add(t, "a tool of MCP server "+server)
		}
	}
	return tools, nil
}
