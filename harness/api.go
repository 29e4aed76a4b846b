// Package harness is the agent: one Session per chat runs turns against a model Provider,
// with tools, a durable JSONL history, steer/follow-up queues and abort. It knows nothing
// of chat platforms.
package harness

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"gateway/hooks"
	"gateway/internal/llm"
	"gateway/internal/secret"
)

// Config is the `llm:` config section (and a profile's override of it).
type Config struct {
	Provider string        `mapstructure:"provider" json:"provider"` // openai | anthropic | fake | echo
	Model    string        `mapstructure:"model" json:"model"`
	BaseURL  string        `mapstructure:"base_url" json:"base_url"`
	APIKey   secret.Secret `mapstructure:"api_key" json:"api_key"`
	// Timeout bounds the model's silence in a call of a session: until its answer starts,
	// and between two pieces of it (a long answer that keeps coming is not cut). A
	// provider used alone bounds its whole call by it.
	Timeout time.Duration `mapstructure:"timeout" json:"timeout"`
	// MaxRetries is how many times a 429/5xx/timeout is retried before the turn fails.
	MaxRetries int `mapstructure:"max_retries" json:"max_retries"`
	MaxTokens  int `mapstructure:"max_tokens" json:"max_tokens"`
	// ContextWindow is the model's context window in tokens; 0 means the known default
	// for the model (ContextWindow), or a conservative one.
	ContextWindow int `mapstructure:"context_window" json:"context_window"`
}

// WithDefaults is c as a provider and a session run it: each key that is not set takes
// what the provider (its endpoint, its timeout, Anthropic's max_tokens) and the model (its
// context window, ContextWindow) give. Only for showing: a profile's section is merged
// onto the global one with its zeros meaning "inherit".
func (c Config) WithDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = defaultTimeout
	}
	switch strings.ToLower(strings.TrimSpace(c.Provider)) {
	case "openai":
		if c.BaseURL == "" {
			c.BaseURL = openAIBaseURL
		}
	case "anthropic":
		if c.BaseURL == "" {
			c.BaseURL = anthropicBaseURL
		}
		if c.MaxTokens <= 0 {
			c.MaxTokens = defaultMaxTokens
		}
	}
	c.ContextWindow = ContextWindow(c.Model, c.ContextWindow)
	return c
}

// Request is one model call.
type Request struct {
	RequestID   string
	Model       string
	System      string
	Messages    []llm.Message
	Tools       []llm.ToolDef
	MaxTokens   int
	Temperature *float64
	// NoToolCalls asks for an answer in words: Tools are still listed (Anthropic refuses a
	// conversation holding tool calls without them) but the model may not call one
	// (tool_choice "none").
	NoToolCalls bool

	// Payload, when set, is handed the exact JSON body about to go to the model API and
	// returns the body to send instead (before_provider_payload). Providers that build no
	// HTTP body (fake, echo) do not call it.
	Payload func(body json.RawMessage) json.RawMessage `json:"-"`
	// OnResponse, when set, is told the HTTP status and headers as soon as the model API
	// answered, failures included (after_provider_response).
	OnResponse func(status int, header http.Header) `json:"-"`
}

// Response is a model call's complete answer.
type Response struct {
	Message    llm.Message // role assistant; Content and/or ToolCalls
	Usage      llm.Usage
	StopReason string
}

// Provider calls one model API. Stream calls onDelta with each piece of answer text as it
// arrives and returns the complete response. Errors that are worth retrying (429, 5xx,
// timeouts) are *RetryableError.
type Provider interface {
	Name() string
	Stream(ctx context.Context, req *Request, onDelta func(text string)) (*Response, error)
}

// RetryableError marks a provider failure worth retrying, with the wait the server asked for.
type RetryableError struct {
	Err        error
	RetryAfter time.Duration // 0 when the server gave none
}

func (e *RetryableError) Error() string { return e.Err.Error() }
func (e *RetryableError) Unwrap() error { return e.Err }

// Tool is a function the model may call. Run must return soon after ctx is done (the
// session bounds each run with a timeout); its error becomes an error result the model sees.
type Tool interface {
	Def() llm.ToolDef
	Run(ctx context.Context, args json.RawMessage) (string, error)
}

// TimeoutTool is a Tool with its own time limit, used instead of the session's.
type TimeoutTool interface {
	Tool
	Timeout() time.Duration
}

// ToolFailed is returned by a tool whose answer is an error result for the model,
// Content as it is (other errors reach the model as "error: <text>").
type ToolFailed struct{ Content string }

func (e *ToolFailed) Error() string { return e.Content }

// ToolCallInfo is what a tool's Run may learn of the call from its ctx (see CallInfo).
type ToolCallInfo struct {
	ID      string
	Session hooks.Session
}

type callKey struct{}

// CallInfo returns the call a tool runs for: its id and the chat's session.
func CallInfo(ctx context.Context) (ToolCallInfo, bool) {
	c, ok := ctx.Value(callKey{}).(ToolCallInfo)
	return c, ok
}

// UpdateKind names a streamed step of a run.
type UpdateKind string

const (
	UpdateDelta     UpdateKind = "delta"      // Text: a piece of answer text
	UpdateToolStart UpdateKind = "tool_start" // Tool set
	UpdateToolEnd   UpdateKind = "tool_end"   // Tool set, IsError/Text = result summary
	UpdateStatus    UpdateKind = "status"     // Text: e.g. "model busy, retrying in 2s"
)

// Update is one streamed step of a run, for the chat to render.
type Update struct {
	Kind     UpdateKind
	Text     string
	ToolID   string
	ToolName string
	IsError  bool
}

// Result is how a run ended.
type Result struct {
	Text    string // the final assistant text of the run
	Aborted bool   // ctx was cancelled; what was said so far is kept in history
	// Ended, when not EndedWhole, says why the answer ends as it does, which the chat is
	// told (the words are the gateway's); the history keeps the answer as it came. A small
	// value rather than the words: a Result is copied along the frames a turn waits under.
	Ended Ending
}

// DefaultOpenAIModel is the model of the openai provider when the config names none.
const DefaultOpenAIModel = "gpt-4o-mini"

// Ending is why a run's final answer ends as it does.
type Ending uint8

const (
	EndedWhole    Ending = iota // the model finished its answer
	EndedAtLength               // it reached the length limit of one answer (llm.max_tokens)
	EndedWithheld               // the provider withheld it (its content filter)
	EndedEmpty                  // the model said nothing
)

// SessionOptions configure one chat's session.
type SessionOptions struct {
	Key      string        // session key, e.g. "telegram:123:7"; names the history file
	Info     hooks.Session // carried on every harness event
	Store    SessionStore  // nil: memory only
	Provider Provider
	Model    string
	System   string
	Tools    []Tool
	Bus      *hooks.Bus // may be nil
	Logger   *slog.Logger
	// MaxRetries and Timeout as in Config; zero means the defaults (3, 120s). A negative
	// MaxRetries disables retries.
	MaxRetries int
	Timeout    time.Duration
	MaxTokens  int
	// ContextWindow is the model's context window in tokens (0: ContextWindow's default).
	// When a request would pass its budget the session compacts the conversation.
	ContextWindow int
	// IdleReset starts a fresh history when the chat was silent longer than this (0: never).
	IdleReset time.Duration
	// OnUsage, when set, is told the tokens of every model call (metrics); OnCompact of
	// every compaction (reason: threshold, overflow, manual; outcome: done, cancelled,
	// failed, nothing). Both are called on the run's goroutine and must be quick.
	OnUsage   func(provider, model string, u llm.Usage)
	OnCompact func(reason, outcome string)
	// MaxTurns bounds the model calls of one run (default 16).
	MaxTurns int
	// ToolTimeout bounds one tool run (default 30s).
	ToolTimeout time.Duration
	// TextOnly is set when the model cannot see (a profile's vision: false): images the
	// user sent are described in words instead of sent.
	TextOnly bool
}

// NewProvider builds the provider the config names. The client's transport is used for
// every call (tests point it at fakes through BaseURL).
func NewProvider(cfg Config, client *http.Client) (Provider, error) {
	return newProvider(cfg, client)
}
