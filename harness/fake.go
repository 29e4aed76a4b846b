package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"gateway/internal/llm"
)

// FakeReply is one scripted answer of the Fake provider.
type FakeReply struct {
	Text string
	// Chunks, if set, are streamed as these deltas (and Text is ignored).
	Chunks    []string
	ToolCalls []llm.ToolCall
	// Delay is waited before the first chunk (cut short by ctx).
	Delay time.Duration
	// ChunkDelay is waited between chunks (cut short by ctx).
	ChunkDelay time.Duration
	// Err, when set, is returned after the chunks (use *RetryableError for a transient one).
	Err error
}

// maxFakeRequests bounds the record of requests kept by a Fake.
const maxFakeRequests = 1024

// Fake is a deterministic scripted Provider for tests. Replies are taken from the script in
// order; when it is empty the func set with SetFunc answers, else the reply is "ok".
// Safe for concurrent use.
type Fake struct {
	mu       sync.Mutex
	script   []FakeReply
	fn       func(req *Request) FakeReply
	requests []Request
	calls    int
	noLog    bool // keep no record of requests (the fake built from config: nobody reads it)
}

// NewFake returns a Fake that answers with script, in order.
func NewFake(script ...FakeReply) *Fake {
	return &Fake{script: slices.Clone(script)}
}

// Push appends replies to the script.
func (f *Fake) Push(r ...FakeReply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, r...)
}

// SetFunc sets the func that answers when the script is empty.
func (f *Fake) SetFunc(fn func(req *Request) FakeReply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fn = fn
}

// Requests returns copies of the requests seen, in order (the latest 1024).
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Request, len(f.requests))
	copy(out, f.requests)
	return out
}

func (f *Fake) Name() string { return "fake" }

func (f *Fake) Stream(ctx context.Context, req *Request, onDelta func(string)) (*Response, error) {
	cp := *req
	cp.Payload, cp.OnResponse = nil, nil
	if !f.noLog {
		cp.Messages = slices.Clone(req.Messages)
		cp.Tools = slices.Clone(req.Tools)
	}

	f.mu.Lock()
	f.calls++
	call := f.calls
	if !f.noLog {
		if len(f.requests) >= maxFakeRequests {
			f.requests = slices.Delete(f.requests, 0, 1)
		}
		f.requests = append(f.requests, cp)
	}
	var r FakeReply
	switch {
	case len(f.script) > 0:
		r = f.script[0]
		f.script = f.script[1:]
	case f.fn != nil:
		fn := f.fn
		f.mu.Unlock()
		r = fn(&cp)
		f.mu.Lock()
	default:
		r = FakeReply{Text: "ok"}
	}
	f.mu.Unlock()

	if err := sleepCtx(ctx, r.Delay); err != nil {
		return nil, err
	}
	if req.OnResponse != nil {
		req.OnResponse(http.StatusOK, nil)
	}
	chunks := r.Chunks
	if chunks == nil && r.Text != "" {
		chunks = []string{r.Text}
	}
	var text strings.Builder
	for i, c := range chunks {
		if i > 0 {
			if err := sleepCtx(ctx, r.ChunkDelay); err != nil {
				return nil, err
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		text.WriteString(c)
		onDelta(c)
	}
	if r.Err != nil {
		return nil, r.Err
	}
	msg := llm.Message{Role: llm.RoleAssistant, Content: text.String()}
	for i, tc := range r.ToolCalls {
		if tc.ID == "" {
			tc.ID = fmt.Sprintf("call_%d_%d", call, i+1)
		}
		if len(tc.Arguments) == 0 {
			tc.Arguments = json.RawMessage("{}")
		}
		msg.ToolCalls = append(msg.ToolCalls, tc)
	}
	stop := "stop"
	if len(msg.ToolCalls) > 0 {
		stop = "tool_calls"
	}
	return &Response{Message: msg, StopReason: stop}, nil
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Echo is the provider used when no model is configured: it repeats the user's text and,
// on the first message of a session, says how to configure a real model.
type Echo struct{}

// NewEcho returns the echo provider.
func NewEcho() *Echo { return &Echo{} }

func (*Echo) Name() string { return "echo" }

// EchoNotice is what echo says on the first message of a session, in plain words: how to
// configure a model is the admin's business, which `gateway run` logs (EchoLog).
const EchoNotice = "No model is set up yet, so I only repeat what you write. " +
	"Whoever runs this gateway can connect one; its log says how."

// EchoLog is what the admin's log says when the gateway runs with echo.
const EchoLog = "no model is configured (llm.provider: echo): chats are answered by repeating them; " +
	"to use a model, set llm.provider (openai or anthropic), llm.model and llm.api_key in the config, or the variable OPENAI_API_KEY"

func (*Echo) Stream(ctx context.Context, req *Request, onDelta func(string)) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if req.OnResponse != nil {
		req.OnResponse(http.StatusOK, nil)
	}
	first := true
	for _, m := range req.Messages {
		if m.Role == llm.RoleAssistant {
			first = false
			break
		}
	}
	var text strings.Builder
	if first {
		text.WriteString(EchoNotice)
		text.WriteString("\n\n")
		onDelta(text.String())
	}
	reply := "echo: " + lastUserText(req.Messages)
	text.WriteString(reply)
	onDelta(reply)
	return &Response{Message: llm.Message{Role: llm.RoleAssistant, Content: text.String()}, StopReason: "stop"}, nil
}
