package hooks

import (
	"context"
	"encoding/json"
	"strings"

	"gateway/channels"
	"gateway/internal/llm"
)

// Receive runs the message:receive chain on ev, updating ev.Parts, ev.Text, ev.IsVoice and
// ev.Notices as transforms apply. It returns the reject result that stopped the chain, or nil.
//
// A transform with Parts replaces every part. A transform with only Text replaces the text
// parts by that text and keeps the media parts after it. A transform with neither changes
// no part (it may still set IsVoice): removing content takes an explicit Parts list.
func (b *Bus) Receive(ctx context.Context, ev *MessageReceive) (rejected *ReceiveResult) {
	ev.Text = joinText(ev.Parts)
	b.run(ctx, ev, func(res any) (bool, error) {
		r, err := asResult[ReceiveResult](res)
		if r == nil {
			return false, err
		}
		switch r.Action {
		case ActionReject:
			rejected = r
			return true, nil
		case ActionTransform:
			switch {
			case r.Parts != nil:
				ev.Parts = r.Parts
			case r.Text != "":
				parts := make([]channels.Part, 0, len(ev.Parts)+1)
				parts = append(parts, channels.TextPart(r.Text))
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
			if r.Notice != "" {
				ev.Notices = append(ev.Notices, r.Notice)
			}
			ev.Text = joinText(ev.Parts)
		}
		return false, nil
	})
	return rejected
}

// joinText is channels.JoinText without the allocation in the common one-text-part case.
func joinText(parts []channels.Part) string {
	var only string
	n := 0
	for _, p := range parts {
		if p.Type == channels.PartText && p.Text != "" {
			only = p.Text
			n++
		}
	}
	if n <= 1 {
		return only
	}
	return channels.JoinText(parts)
}

// Send collects the parts of every message:send handler, in registration order.
func (b *Bus) Send(ctx context.Context, ev *MessageSend) []channels.Part {
	var parts []channels.Part
	b.run(ctx, ev, func(res any) (bool, error) {
		r, err := asResult[SendResult](res)
		if r != nil {
			parts = append(parts, r.Parts...)
		}
		return false, err
	})
	return parts
}

// Context chains the message list; each handler sees the list as the previous one left it.
// A result with nil Messages changes nothing; an empty non-nil list empties it.
func (b *Bus) Context(ctx context.Context, ev *Context) []llm.Message {
	b.run(ctx, ev, func(res any) (bool, error) {
		r, err := asResult[ContextResult](res)
		if r != nil && r.Messages != nil {
			ev.Messages = r.Messages
		}
		return false, err
	})
	return ev.Messages
}

// BeforeAgentStart chains the system prompt and collects injected messages, in order.
func (b *Bus) BeforeAgentStart(ctx context.Context, ev *BeforeAgentStart) (system string, inject []llm.Message) {
	b.run(ctx, ev, func(res any) (bool, error) {
		r, err := asResult[BeforeAgentStartResult](res)
		if r != nil {
			inject = append(inject, r.Messages...)
			if r.SystemPrompt != nil {
				ev.SystemPrompt = *r.SystemPrompt
			}
		}
		return false, err
	})
	return ev.SystemPrompt, inject
}

// ToolCall runs handlers in order; argument changes are visible to later handlers and the
// first block wins. It returns the block (nil when the call may run); ev.Arguments holds
// the arguments to run with.
func (b *Bus) ToolCall(ctx context.Context, ev *ToolCall) (blocked *ToolCallResult) {
	b.run(ctx, ev, func(res any) (bool, error) {
		r, err := asResult[ToolCallResult](res)
		if r == nil {
			return false, err
		}
		if r.Block {
			blocked = r
			return true, nil
		}
		if len(r.Arguments) > 0 {
			ev.Arguments = r.Arguments
		}
		return false, nil
	})
	return blocked
}

// ToolResult accumulates patches into ev; each handler sees the patched result.
func (b *Bus) ToolResult(ctx context.Context, ev *ToolResult) {
	b.run(ctx, ev, func(res any) (bool, error) {
		r, err := asResult[ToolResultPatch](res)
		if r != nil {
			if r.Content != nil {
				ev.Content = *r.Content
			}
			if r.IsError != nil {
				ev.IsError = *r.IsError
			}
		}
		return false, err
	})
}

// SessionBefore runs a session_before_* event; the first cancel wins.
func (b *Bus) SessionBefore(ctx context.Context, ev Event) (cancel *CancelResult) {
	b.run(ctx, ev, func(res any) (bool, error) {
		r, err := asResult[CancelResult](res)
		if r != nil && r.Cancel {
			cancel = r
			return true, nil
		}
		return false, err
	})
	return cancel
}

// BeforeCompact runs session_before_compact: the first result that cancels or hands a
// summary wins. It returns nil when every handler let the compaction go ahead.
func (b *Bus) BeforeCompact(ctx context.Context, ev *SessionBeforeCompact) (res *CompactResult) {
	b.run(ctx, ev, func(r any) (bool, error) {
		c, err := asResult[CompactResult](r)
		if c == nil {
			// A handler written for the other session_before_* events.
			if cr, ok := r.(*CancelResult); ok && cr != nil {
				if cr.Cancel {
					res = &CompactResult{Cancel: true, Reason: cr.Reason}
					return true, nil
				}
				return false, nil
			}
			return false, err
		}
		if c.Cancel || strings.TrimSpace(c.Summary) != "" {
			res = c
			return true, nil
		}
		return false, nil
	})
	return res
}

// BeforeProviderRequest chains the request options. A result whose options are all zero
// (e.g. an empty object from a hook program) changes nothing.
func (b *Bus) BeforeProviderRequest(ctx context.Context, ev *BeforeProviderRequest) ProviderOptions {
	b.run(ctx, ev, func(res any) (bool, error) {
		r, err := asResult[ProviderRequestResult](res)
		if r != nil && r.Options != (ProviderOptions{}) {
			ev.Options = r.Options
		}
		return false, err
	})
	return ev.Options
}

// BeforeProviderPayload chains the JSON payload. An empty payload changes nothing.
func (b *Bus) BeforeProviderPayload(ctx context.Context, ev *BeforeProviderPayload) json.RawMessage {
	b.run(ctx, ev, func(res any) (bool, error) {
		r, err := asResult[ProviderPayloadResult](res)
		if r != nil && len(r.Payload) > 0 {
			ev.Payload = r.Payload
		}
		return false, err
	})
	return ev.Payload
}
