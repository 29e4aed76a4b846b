// Package llm holds the provider-neutral conversation types shared by the harness
// (which talks to models) and the hook bus (whose events carry conversations).
package llm

import "encoding/json"

// Role of a conversation message.
type Role string

const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one conversation entry as the model sees it.
type Message struct {
	Role       Role       `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"` // set on RoleTool messages
	Name       string     `json:"name,omitempty"`         // tool name on RoleTool messages
	IsError    bool       `json:"is_error,omitempty"`     // tool result that failed
}

// ToolCall is the model asking to run a tool.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ToolDef describes a tool to the model. Parameters is a JSON Schema object.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Usage counts tokens of one provider call, when the provider reports them.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}
