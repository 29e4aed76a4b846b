package gateway

import (
	"context"
	"encoding/json"
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

// Timeout is the tool's own limit from HOOK.yaml (0: the hook's, which bounds the call too).
func (h hookTool) Timeout() time.Duration { return h.t.Timeout }

func (h hookTool) Run(ctx context.Context, args json.RawMessage) (string, error) {
	call, _ := harness.CallInfo(ctx)
	out, err := h.t.Run(ctx, &hooks.Tool{Session: call.Session, Name: h.t.Name, ToolCallID: call.ID, Arguments: args})
	if err != nil {
		return "", err
	}
	if out.IsError {
		return "", &harness.ToolFailed{Content: out.Content}
	}
	return out.Content, nil
}

// sessionTools are the tools a session of the profile has: the builtins it names, then
// those its hooks declare, then the MCP servers' that are up (the first of a name wins).
func sessionTools(rt *Runtime, profileName string, names []string) ([]harness.Tool, error) {
	var tools []harness.Tool
	if rt.Tools != nil && len(names) > 0 {
		var err error
		if tools, err = rt.Tools(names); err != nil {
			return nil, err
		}
	}
	taken := map[string]bool{}
	for _, t := range tools {
		taken[t.Def().Name] = true
	}
	for _, t := range rt.Commands.Tools(profileName) {
		if !taken[t.Name] {
			taken[t.Name] = true
			tools = append(tools, hookTool{t})
		}
	}
	if rt.MCPTools != nil {
		for _, t := range rt.MCPTools(profileName) {
			if !taken[t.Def().Name] {
				taken[t.Def().Name] = true
				tools = append(tools, t)
			}
		}
	}
	return tools, nil
}
