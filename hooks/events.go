package hooks

import (
	"encoding/json"

	"gateway/channels"
	"gateway/internal/llm"
)

// WireVersion is the version of the JSON form of events and results that hook programs see.
// Fields are only ever added within a version.
const WireVersion = 1

// Event is implemented by every event type. EventName returns the same constant for a nil
// pointer, so the name of an event type can be read from its zero value.
type Event interface {
	EventName() string
}

// Session identifies the chat an event belongs to. Events about a chat embed it, so its
// fields sit at the top level of their JSON form.
type Session struct {
	SessionKey string `json:"session_key"`
	Channel    string `json:"channel"`
	ChatID     string `json:"chat_id"`
	ThreadID   string `json:"thread_id"`
	UserID     string `json:"user_id"`
	Profile    string `json:"profile"`
}

// SessionInfo returns the session; handlers registered with ForProfile use it to filter.
func (s *Session) SessionInfo() *Session { return s }

// Event names.
const (
	NameGatewayStartup        = "gateway:startup"
	NameGatewayStop           = "gateway:stop"
	NameGatewayError          = "gateway:error"
	NameChannelConnect        = "channel:connect"
	NameChannelDisconnect     = "channel:disconnect"
	NameMessageReceive        = "message:receive"
	NameMessageSend           = "message:send"
	NameMessageCancel         = "message:cancel"
	NameAgentStart            = "agent_start"
	NameAgentEnd              = "agent_end"
	NameTurnStart             = "turn_start"
	NameTurnEnd               = "turn_end"
	NameMessageUpdate         = "message_update"
	NameMessageEnd            = "message_end"
	NameToolCall              = "tool_call"
	NameToolResult            = "tool_result"
	NameContext               = "context"
	NameBeforeAgentStart      = "before_agent_start"
	NameSessionBeforeCompact  = "session_before_compact"
	NameSessionCompact        = "session_compact"
	NameSessionBeforeReset    = "session_before_reset"
	NameBeforeProviderRequest = "before_provider_request"
	NameBeforeProviderPayload = "before_provider_payload"
	NameAfterProviderResponse = "after_provider_response"
)

// --- gateway and channel lifecycle (observation) ---

// GatewayStartup is emitted once every enabled channel is connected: at start, or later
// when one that could not be reached at start connects. Channels are all of them.
type GatewayStartup struct {
	Channels []string `json:"channels"`
}

// GatewayStop is emitted before the channels stop. Reason is "shutdown" (SIGTERM, Ctrl-C).
type GatewayStop struct {
	Reason string `json:"reason"`
}

// GatewayError reports a failure: stage "receive" (an inbound message: a failed
// message:receive hook, hooks out of time, a full queue), "turn" (the model, turn_timeout)
// or "delivery" (a send to the chat).
type GatewayError struct {
	Session
	Stage string `json:"stage"` // "receive", "turn", "delivery"
	Error string `json:"error"`
}

type ChannelConnect struct {
	Channel string `json:"channel"`
}

type ChannelDisconnect struct {
	Channel string `json:"channel"`
	Error   string `json:"error,omitempty"`
}

// --- messages ---

// MessageReceive is an inbound message before anything else sees its content.
// Reducer: chain (see Bus.Receive).
type MessageReceive struct {
	Session
	MessageID string            `json:"message_id"`
	ChatType  channels.ChatType `json:"chat_type"`
	Mentioned bool              `json:"mentioned,omitempty"`
	ReplyTo   *channels.Reply   `json:"reply_to,omitempty"`
	Text      string            `json:"text"` // the text parts joined; kept in step with Parts by the reducer
	Parts     []channels.Part   `json:"parts"`
	IsVoice   bool              `json:"is_voice"`
	// Language is the profile's spoken language hint for STT ("" = auto).
	Language string `json:"language,omitempty"`
	// Notices gathers the transforms' notices (ReceiveResult.Notice), in chain order: what
	// the gateway tells the user before the message goes on. Not on the wire.
	Notices []string `json:"-"`
}

// Receive actions.
const (
	ActionContinue  = "continue"
	ActionTransform = "transform"
	ActionReject    = "reject"
)

// ReceiveResult is a message:receive handler's answer. Transform with Parts replaces all
// parts; transform with only Text replaces the text parts with that text and keeps media.
// Reject stops the chain; Reason goes back to the chat.
type ReceiveResult struct {
	Action string          `json:"action"`
	Text   string          `json:"text,omitempty"`
	Parts  []channels.Part `json:"parts,omitempty"`
	Reason string          `json:"reason,omitempty"`
	// IsVoice, when set by a transform, overrides the message's is_voice flag.
	IsVoice *bool `json:"is_voice,omitempty"`
	// Notice, on a transform, is told to the user before the message goes on: what part
	// of it was left out, and why (audio that could not be transcribed beside a caption).
	// Builtin handlers only: not on the wire, whose results are fixed by DESIGN.md.
	Notice string `json:"-"`
}

// MessageSend is emitted after a turn settled and before done. Reducer: collect parts.
type MessageSend struct {
	Session
	InputText    string `json:"input_text"`
	ResponseText string `json:"response_text"`
	IsVoice      bool   `json:"is_voice"` // the user spoke the message this answers
	// TTSMode overrides the configured TTS mode for this chat ("" = configured; off|inbound|always),
	// from the profile or the chat's /voice command. Voice and Language likewise override the TTS voice.
	TTSMode  string `json:"tts_mode,omitempty"`
	Voice    string `json:"voice,omitempty"`
	Language string `json:"language,omitempty"`
}

// SendResult carries parts to deliver before done.
type SendResult struct {
	Parts []channels.Part `json:"parts"`
}

// MessageCancel is emitted when a running turn is stopped, on the hooks the turn started
// with. Reason says why in words: "stopped by the user" (/stop), "a new conversation was
// started" (/new), "interrupted by a newer message" (interrupt mode), "the gateway is
// shutting down", or that the turn ran longer than turn_timeout.
type MessageCancel struct {
	Session
	Reason string `json:"reason"`
}

// --- harness ---

type AgentStart struct {
	Session
	Prompt string `json:"prompt"`
}

type AgentEnd struct {
	Session
	Response string `json:"response"`
	Error    string `json:"error,omitempty"`
	Aborted  bool   `json:"aborted,omitempty"`
}

type TurnStart struct {
	Session
	Turn int `json:"turn"` // model calls within one agent run, from 1
}

type TurnEnd struct {
	Session
	Turn    int           `json:"turn"`
	Message llm.Message   `json:"message"`
	Results []llm.Message `json:"tool_results,omitempty"`
}

// MessageUpdate carries a streamed piece of the assistant's answer, once per delta. Hook
// programs observing "*" do not see it (see streamed); they get the whole answer in
// MessageEnd.
type MessageUpdate struct {
	Session
	Delta string `json:"delta"`
}

type MessageEnd struct {
	Session
	Message llm.Message `json:"message"`
}

// ToolCall is emitted before a tool runs. Reducer: in order, first block wins; argument
// changes are visible to later handlers.
type ToolCall struct {
	Session
	ToolCallID string          `json:"tool_call_id"`
	Tool       string          `json:"tool"`
	Arguments  json.RawMessage `json:"arguments"`
}

// ToolCallResult blocks the call (Reason goes to the model) or replaces its arguments.
type ToolCallResult struct {
	Block     bool            `json:"block,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ToolResult is emitted after a tool ran. Reducer: patches accumulate; each handler sees
// the patched result.
type ToolResult struct {
	Session
	ToolCallID string          `json:"tool_call_id"`
	Tool       string          `json:"tool"`
	Arguments  json.RawMessage `json:"arguments"`
	Content    string          `json:"content"`
	IsError    bool            `json:"is_error"`
}

// ToolResultPatch changes the fields it sets.
type ToolResultPatch struct {
	Content *string `json:"content,omitempty"`
	IsError *bool   `json:"is_error,omitempty"`
}

// Context is emitted before each model call with the messages it will see. Reducer: chain.
// Entries are the branch's entries behind them, custom ones included, in the history
// file's form, so a hook can rebuild the messages from them.
type Context struct {
	Session
	Messages []llm.Message     `json:"messages"`
	Entries  []json.RawMessage `json:"entries"`
}

// ContextResult replaces the message list.
type ContextResult struct {
	Messages []llm.Message `json:"messages"`
}

// BeforeAgentStart is emitted once per run before the first model call. Reducer: injected
// messages are collected; the system prompt is chained.
type BeforeAgentStart struct {
	Session
	Prompt       string `json:"prompt"`
	SystemPrompt string `json:"system_prompt"`
}

// BeforeAgentStartResult injects messages (appended after the user's prompt) and/or
// replaces the system prompt.
type BeforeAgentStartResult struct {
	Messages     []llm.Message `json:"messages,omitempty"`
	SystemPrompt *string       `json:"system_prompt,omitempty"`
}

// Why a compaction runs.
const (
	CompactThreshold = "threshold" // the next request would pass the context budget
	CompactOverflow  = "overflow"  // the provider said the context is too long
	CompactManual    = "manual"    // /compact
)

// SessionBeforeCompact is emitted before the older part of the conversation is summarised.
// Messages are the ones about to be summarised (the newest ones are kept verbatim). Reducer:
// the first cancel or summary wins; a summary is used instead of asking the model.
type SessionBeforeCompact struct {
	Session
	Entries         int           `json:"entries"` // messages to be summarised
	TokensBefore    int           `json:"tokens_before"`
	Reason          string        `json:"reason"`                     // threshold, overflow or manual
	Instructions    string        `json:"instructions,omitempty"`     // given with /compact
	PreviousSummary string        `json:"previous_summary,omitempty"` // of the compaction before, folded in
	Messages        []llm.Message `json:"messages"`
}

// CompactResult cancels the compaction or hands the summary to use.
type CompactResult struct {
	Cancel  bool   `json:"cancel,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Summary string `json:"summary,omitempty"`
}

// SessionCompact is emitted after a compaction entry was saved: the model now sees the summary
// and then the messages from FirstKeptEntryID on.
type SessionCompact struct {
	Session
	Reason           string `json:"reason"`
	Summary          string `json:"summary"`
	FirstKeptEntryID string `json:"first_kept_entry_id"`
	TokensBefore     int    `json:"tokens_before"`
	TokensAfter      int    `json:"tokens_after"` // an estimate
	FromHook         bool   `json:"from_hook,omitempty"`
}

// SessionBeforeReset is emitted before /new starts a fresh history. Reducer: first cancel wins.
type SessionBeforeReset struct {
	Session
}

// CancelResult cancels a session_before_* operation.
type CancelResult struct {
	Cancel bool   `json:"cancel"`
	Reason string `json:"reason,omitempty"`
}

// ProviderOptions are the request options a hook may change before a provider call.
type ProviderOptions struct {
	Provider    string   `json:"provider"`
	Model       string   `json:"model"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
}

// BeforeProviderRequest is emitted before each provider call. Reducer: chain of options.
type BeforeProviderRequest struct {
	Session
	RequestID string          `json:"request_id"`
	Options   ProviderOptions `json:"options"`
}

// ProviderRequestResult replaces the options.
type ProviderRequestResult struct {
	Options ProviderOptions `json:"options"`
}

// BeforeProviderPayload is emitted with the exact JSON body about to be sent. Reducer: chain.
type BeforeProviderPayload struct {
	Session
	RequestID string          `json:"request_id"`
	Payload   json.RawMessage `json:"payload"`
}

// ProviderPayloadResult replaces the payload.
type ProviderPayloadResult struct {
	Payload json.RawMessage `json:"payload"`
}

// AfterProviderResponse is emitted when the provider answered (headers received).
type AfterProviderResponse struct {
	Session
	RequestID string            `json:"request_id"`
	Status    int               `json:"status"`
	Headers   map[string]string `json:"headers,omitempty"`
}

func (*GatewayStartup) EventName() string        { return NameGatewayStartup }
func (*GatewayStop) EventName() string           { return NameGatewayStop }
func (*GatewayError) EventName() string          { return NameGatewayError }
func (*ChannelConnect) EventName() string        { return NameChannelConnect }
func (*ChannelDisconnect) EventName() string     { return NameChannelDisconnect }
func (*MessageReceive) EventName() string        { return NameMessageReceive }
func (*MessageSend) EventName() string           { return NameMessageSend }
func (*MessageCancel) EventName() string         { return NameMessageCancel }
func (*AgentStart) EventName() string            { return NameAgentStart }
func (*AgentEnd) EventName() string              { return NameAgentEnd }
func (*TurnStart) EventName() string             { return NameTurnStart }
func (*TurnEnd) EventName() string               { return NameTurnEnd }
func (*MessageUpdate) EventName() string         { return NameMessageUpdate }
func (*MessageEnd) EventName() string            { return NameMessageEnd }
func (*ToolCall) EventName() string              { return NameToolCall }
func (*ToolResult) EventName() string            { return NameToolResult }
func (*Context) EventName() string               { return NameContext }
func (*BeforeAgentStart) EventName() string      { return NameBeforeAgentStart }
func (*SessionBeforeCompact) EventName() string  { return NameSessionBeforeCompact }
func (*SessionCompact) EventName() string        { return NameSessionCompact }
func (*SessionBeforeReset) EventName() string    { return NameSessionBeforeReset }
func (*BeforeProviderRequest) EventName() string { return NameBeforeProviderRequest }
func (*BeforeProviderPayload) EventName() string { return NameBeforeProviderPayload }
func (*AfterProviderResponse) EventName() string { return NameAfterProviderResponse }

// --- extensions: commands and tools a hook directory declares ---

// Name of the events a hook's program gets for the commands and tools it declared in
// HOOK.yaml. They are not bus events: a hook cannot list them under events.
const (
	NameCommand = "command"
	NameTool    = "tool"
)

// Command is sent to the hook that declared the command when a chat uses it ("/pop 2").
// Entries are the session's entries on the current branch, custom ones included, in the
// history file's form (see docs/hooks.md).
type Command struct {
	Session
	Name    string            `json:"name"`
	Args    []string          `json:"args"`
	ArgsRaw string            `json:"args_raw"`
	Entries []json.RawMessage `json:"entries"`
}

// CommandResult answers a command; its fields combine. Text is answered without the model;
// Prompt is sent to the agent as the user's message; Entries (JSON objects with a "type"
// the core does not use) are appended to the session.
type CommandResult struct {
	Text    string            `json:"text,omitempty"`
	Prompt  string            `json:"prompt,omitempty"`
	Entries []json.RawMessage `json:"entries,omitempty"`
}

// Tool is sent to the hook that declared the tool when the model calls it (after the
// tool_call hooks allowed it).
type Tool struct {
	Session
	Name       string          `json:"name"`
	ToolCallID string          `json:"tool_call_id"`
	Arguments  json.RawMessage `json:"arguments"`
}

// ToolOutput is a hook tool's result; it goes to the model (through the tool_result hooks).
type ToolOutput struct {
	Content string `json:"content"`
	IsError bool   `json:"is_error"`
}

func (*Command) EventName() string { return NameCommand }
func (*Tool) EventName() string    { return NameTool }
