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

// Message is one conversation entry as the model sees it. Content is its text; Parts are
// the media the user sent with it (images, documents), referenced by path, never inlined:
// the provider reads, scales and encodes them when the message is sent.
type Message struct {
	Role       Role       `json:"role"`
	Content    string     `json:"content"`
	Parts      []Part     `json:"parts,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"` // set on RoleTool messages
	Name       string     `json:"name,omitempty"`         // tool name on RoleTool messages
	IsError    bool       `json:"is_error,omitempty"`     // tool result that failed
}

// PartType names what a Part carries.
type PartType string

const (
	PartImage PartType = "image" // a photo, screenshot or image document
	PartFile  PartType = "file"  // a document: text and PDFs reach the model as text
)

// Part is a media file of a conversation message: where it is on disk (under the gateway's
// state_dir/media), what it is and what the user called it. A history entry whose file was
// pruned still loads; the model is then told the file is no longer available.
type Part struct {
	Type PartType `json:"type"`
	MIME string   `json:"mime,omitempty"`
	Path string   `json:"path"`
	Name string   `json:"name,omitempty"`
	Size int64    `json:"size,omitempty"` // bytes, when known
	// Data holds an image as it is about to be sent (scaled, re-encoded; MIME then names
	// its encoding) while a request is built. It is never stored nor put on the hook wire.
	Data []byte `json:"-"`
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

// IsName reports whether s is 1 to max ASCII letters, digits, _ or -: what providers accept
// in a tool's name. (A loop, not a regexp: a compiled {1,64} is a program of 64 steps, kept
// for the life of the process for a check made at load.)
func IsName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
