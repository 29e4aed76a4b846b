package hooks

import (
	"context"
	"encoding/json"

	"gateway/channels"
	"gateway/internal/llm"
)

// Receive runs the message:receive chain on ev, updating ev.Parts, ev.Text and ev.IsVoice as
// transforms apply. It returns the reject result that stopped the chain, or nil.
func (b *Bus) Receive(ctx context.Context, ev *MessageReceive) (rejected *ReceiveResult) {
	ev.Text = channels.JoinText(ev.Parts)
	b.run(ctx, ev, func(res any) bool {
		r, ok := res.(*ReceiveResult)
		if !ok || r == nil {
			return true
		}
		switch r.Action {
		case ActionReject:
			rejected = r
			return false
		case ActionTransform:
			if r.Parts != nil {
				ev.Parts = r.Parts
			} else {
				parts := []channels.Part{channels.TextPart(r.Text)}
				for _, p := range ev.Parts {
					if p.Type != channels.PartText {
						parts = append(parts, p)
					}
				}
				ev.Parts = parts
			}
			if r.IsVoice != nil {
				ev.IsVoice = *r.IsVoice
			}
			ev.Text = channels.JoinText(ev.Parts)
		}
		return true
	})
	return rejected
}

// Send collects the parts of every message:send handler, in registration order.
func (b *Bus) Send(ctx context.Context, ev *MessageSend) []channels.Part {
	var parts []channels.Part
	b.run(ctx, ev, func(res any) bool {
		if r, ok := res.(*SendResult); ok && r != nil {
			parts = append(parts, r.Parts...)
		}
		return true
	})
	return parts
}

// Context chains the message list; each handler sees the list as the previous one left it.
func (b *Bus) Context(ctx context.Context, ev *Context) []llm.Message {
	b.run(ctx, ev, func(res any) bool {
		if r, ok := res.(*ContextResult); ok && r != nil && r.Messages != nil {
			ev.Messages = r.Messages
		}
		return true
	})
	return ev.Messages
}

// BeforeAgentStart chains the system prompt and collects injected messages.
func (b *Bus) BeforeAgentStart(ctx context.Context, ev *BeforeAgentStart) (system string, inject []llm.Message) {
	b.run(ctx, ev, func(res any) bool {
		if r, ok := res.(*BeforeAgentStartResult); ok && r != nil {
			inject = append(inject, r.Messages...)
			if r.SystemPrompt != nil {
				ev.SystemPrompt = *r.SystemPrompt
			}
		}
		return true
	})
	return ev.SystemPrompt, inject
}

// ToolCall runs handlers in order; argument changes are visible to later handlers and the
// first block wins. It returns the block (nil when the call may run); ev.Arguments holds
// the arguments to run with.
func (b *Bus) ToolCall(ctx context.Context, ev *ToolCall) (blocked *ToolCallResult) {
	b.run(ctx, ev, func(res any) bool {
		r, ok := res.(*ToolCallResult)
		if !ok || r == nil {
			return true
		}
		if r.Block {
			blocked = r
			return false
		}
		if len(r.Arguments) > 0 {
			ev.Arguments = r.Arguments
		}
		return true
	})
	return blocked
}

// ToolResult accumulates patches into ev; each handler sees the patched result.
func (b *Bus) ToolResult(ctx context.Context, ev *ToolResult) {
	b.run(ctx, ev, func(res any) bool {
		if r, ok := res.(*ToolResultPatch); ok && r != nil {
			if r.Content != nil {
				ev.Content = *r.Content
			}
			if r.IsError != nil {
				ev.IsError = *r.IsError
			}
		}
		return true
	})
}

// SessionBefore runs a session_before_* event; the first cancel wins.
func (b *Bus) SessionBefore(ctx context.Context, ev Event) (cancel *CancelResult) {
	b.run(ctx, ev, func(res any) bool {
		if r, ok := res.(*CancelResult); ok && r != nil && r.Cancel {
			cancel = r
			return false
		}
		return true
	})
	return cancel
}

// BeforeProviderRequest chains the request options.
func (b *Bus) BeforeProviderRequest(ctx context.Context, ev *BeforeProviderRequest) ProviderOptions {
	b.run(ctx, ev, func(res any) bool {
		if r, ok := res.(*ProviderRequestResult); ok && r != nil {
			ev.Options = r.Options
		}
		return true
	})
	return ev.Options
}

// BeforeProviderPayload chains the JSON payload.
func (b *Bus) BeforeProviderPayload(ctx context.Context, ev *BeforeProviderPayload) json.RawMessage {
	b.run(ctx, ev, func(res any) bool {
		if r, ok := res.(*ProviderPayloadResult); ok && r != nil && len(r.Payload) > 0 {
			ev.Payload = r.Payload
		}
		return true
	})
	return ev.Payload
}
