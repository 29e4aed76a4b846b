package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gateway/channels"
	"gateway/internal/llm"
)

func receiveEvent(parts ...channels.Part) *MessageReceive {
	return &MessageReceive{
		Session: Session{SessionKey: "web:1", Channel: "web", ChatID: "1", UserID: "42", Profile: "assistant"},
		Parts:   parts,
	}
}

var audio = channels.Part{Type: channels.PartAudio, MIME: "audio/ogg", Path: "/tmp/voice.ogg", Voice: true}

func TestReceiveTransformTextKeepsMedia(t *testing.T) {
	b := newTestBus(t, time.Second)
	var seen []string
	b.On(NameMessageReceive, "a", func(ctx context.Context, ev Event) (any, error) {
		m := ev.(*MessageReceive)
		seen = append(seen, m.Text)
		return &ReceiveResult{Action: ActionTransform, Text: "transcript"}, nil
	})
	b.On(NameMessageReceive, "b", func(ctx context.Context, ev Event) (any, error) {
		m := ev.(*MessageReceive)
		seen = append(seen, m.Text)
		if len(m.Parts) != 2 || m.Parts[1].Path != audio.Path {
			t.Errorf("second handler sees parts %+v, want text then the audio", m.Parts)
		}
		return &ReceiveResult{Action: ActionContinue}, nil
	})
	ev := receiveEvent(channels.TextPart("caption"), audio)
	if rej := b.Receive(ctxT(t), ev); rej != nil {
		t.Fatalf("rejected: %+v", rej)
	}
	if want := []string{"caption", "transcript"}; !slices.Equal(seen, want) {
		t.Errorf("handlers saw %q, want %q", seen, want)
	}
	want := []channels.Part{channels.TextPart("transcript"), audio}
	if !reflect.DeepEqual(ev.Parts, want) || ev.Text != "transcript" {
		t.Errorf("after chain: parts %+v text %q", ev.Parts, ev.Text)
	}
	if len(b.Failures()) != 0 {
		t.Errorf("unexpected failures %+v", b.Failures())
	}
}

func TestReceiveTransformPartsReplacesAll(t *testing.T) {
	b := newTestBus(t, time.Second)
	b.On(NameMessageReceive, "stt", func(ctx context.Context, ev Event) (any, error) {
		return &ReceiveResult{Action: ActionTransform, Parts: []channels.Part{channels.TextPart("hi"), channels.TextPart("there")}, IsVoice: ptr(true)}, nil
	})
	ev := receiveEvent(audio)
	b.Receive(ctxT(t), ev)
	if len(ev.Parts) != 2 || ev.Parts[0].Text != "hi" || ev.Text != "hi\nthere" || !ev.IsVoice {
		t.Errorf("got parts %+v text %q voice %v", ev.Parts, ev.Text, ev.IsVoice)
	}
}

func TestReceiveTransformWithoutContentKeepsMessage(t *testing.T) {
	b := newTestBus(t, time.Second)
	b.On(NameMessageReceive, "flag", func(ctx context.Context, ev Event) (any, error) {
		return &ReceiveResult{Action: ActionTransform, IsVoice: ptr(true)}, nil
	})
	ev := receiveEvent(channels.TextPart("keep me"), audio)
	b.Receive(ctxT(t), ev)
	if ev.Text != "keep me" || len(ev.Parts) != 2 || !ev.IsVoice {
		t.Errorf("got parts %+v text %q voice %v", ev.Parts, ev.Text, ev.IsVoice)
	}
}

func TestReceiveFirstRejectStops(t *testing.T) {
	b := newTestBus(t, time.Second)
	var calls []string
	reg := func(name string, res *ReceiveResult) {
		b.On(NameMessageReceive, name, func(ctx context.Context, ev Event) (any, error) {
			calls = append(calls, name)
			return res, nil
		})
	}
	reg("a", &ReceiveResult{Action: ActionContinue})
	reg("b", &ReceiveResult{Action: ActionReject, Reason: "no spam"})
	reg("c", &ReceiveResult{Action: ActionReject, Reason: "later"})
	rej := b.Receive(ctxT(t), receiveEvent(channels.TextPart("buy now")))
	if rej == nil || rej.Reason != "no spam" {
		t.Fatalf("rejected = %+v, want the first reject", rej)
	}
	if !slices.Equal(calls, []string{"a", "b"}) {
		t.Errorf("calls = %q, want the chain to stop at b", calls)
	}
}

func TestSendCollectsInOrder(t *testing.T) {
	b := newTestBus(t, time.Second)
	for _, s := range []string{"one", "two", "three"} {
		b.On(NameMessageSend, s, func(ctx context.Context, ev Event) (any, error) {
			if s == "two" {
				return nil, nil // no result
			}
			return &SendResult{Parts: []channels.Part{channels.TextPart(s + ":" + ev.(*MessageSend).ResponseText)}}, nil
		})
	}
	parts := b.Send(ctxT(t), &MessageSend{ResponseText: "r"})
	if got := channels.JoinText(parts); got != "one:r\nthree:r" {
		t.Errorf("parts = %q", got)
	}
}

func TestContextChain(t *testing.T) {
	b := newTestBus(t, time.Second)
	b.On(NameContext, "add", func(ctx context.Context, ev Event) (any, error) {
		msgs := append(slices.Clone(ev.(*Context).Messages), llm.Message{Role: llm.RoleUser, Content: "added"})
		return &ContextResult{Messages: msgs}, nil
	})
	b.On(NameContext, "none", func(ctx context.Context, ev Event) (any, error) { return &ContextResult{}, nil })
	b.On(NameContext, "drop-first", func(ctx context.Context, ev Event) (any, error) {
		msgs := ev.(*Context).Messages
		if len(msgs) != 2 {
			t.Errorf("third handler sees %d messages, want 2", len(msgs))
		}
		return &ContextResult{Messages: msgs[1:]}, nil
	})
	got := b.Context(ctxT(t), &Context{Messages: []llm.Message{{Role: llm.RoleUser, Content: "orig"}}})
	if len(got) != 1 || got[0].Content != "added" {
		t.Errorf("messages = %+v", got)
	}
}

func TestBeforeAgentStartCollectsAndChains(t *testing.T) {
	b := newTestBus(t, time.Second)
	b.On(NameBeforeAgentStart, "a", func(ctx context.Context, ev Event) (any, error) {
		sp := ev.(*BeforeAgentStart).SystemPrompt + " +a"
		return &BeforeAgentStartResult{Messages: []llm.Message{{Role: llm.RoleUser, Content: "m1"}}, SystemPrompt: &sp}, nil
	})
	b.On(NameBeforeAgentStart, "b", func(ctx context.Context, ev Event) (any, error) {
		sp := ev.(*BeforeAgentStart).SystemPrompt + " +b"
		return &BeforeAgentStartResult{Messages: []llm.Message{{Role: llm.RoleUser, Content: "m2"}}, SystemPrompt: &sp}, nil
	})
	b.On(NameBeforeAgentStart, "c", func(ctx context.Context, ev Event) (any, error) {
		return &BeforeAgentStartResult{Messages: []llm.Message{{Role: llm.RoleUser, Content: "m3"}}}, nil
	})
	sys, inject := b.BeforeAgentStart(ctxT(t), &BeforeAgentStart{SystemPrompt: "base"})
	if sys != "base +a +b" {
		t.Errorf("system = %q", sys)
	}
	var got []string
	for _, m := range inject {
		got = append(got, m.Content)
	}
	if !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Errorf("injected = %q", got)
	}
}

func TestToolCallFirstBlockWinsAndArgumentsChain(t *testing.T) {
	b := newTestBus(t, time.Second)
	var thirdCalled bool
	b.On(NameToolCall, "rewrite", func(ctx context.Context, ev Event) (any, error) {
		return &ToolCallResult{Arguments: json.RawMessage(`{"path":"/safe"}`)}, nil
	})
	b.On(NameToolCall, "guard", func(ctx context.Context, ev Event) (any, error) {
		if string(ev.(*ToolCall).Arguments) != `{"path":"/safe"}` {
			return &ToolCallResult{Block: true, Reason: "unsafe args seen: " + string(ev.(*ToolCall).Arguments)}, nil
		}
		return &ToolCallResult{Block: true, Reason: "read-only profile"}, nil
	})
	b.On(NameToolCall, "late", func(ctx context.Context, ev Event) (any, error) {
		thirdCalled = true
		return &ToolCallResult{Block: true, Reason: "late"}, nil
	})
	ev := &ToolCall{Tool: "write", Arguments: json.RawMessage(`{"path":"/etc"}`)}
	blk := b.ToolCall(ctxT(t), ev)
	if blk == nil || blk.Reason != "read-only profile" {
		t.Fatalf("block = %+v", blk)
	}
	if thirdCalled {
		t.Error("handler after the block ran")
	}
	if string(ev.Arguments) != `{"path":"/safe"}` {
		t.Errorf("arguments = %s", ev.Arguments)
	}

	// Without a block the changed arguments are what runs.
	b2 := newTestBus(t, time.Second)
	b2.On(NameToolCall, "rewrite", func(ctx context.Context, ev Event) (any, error) {
		return &ToolCallResult{Arguments: json.RawMessage(`{"n":2}`)}, nil
	})
	ev2 := &ToolCall{Arguments: json.RawMessage(`{"n":1}`)}
	if blk := b2.ToolCall(ctxT(t), ev2); blk != nil || string(ev2.Arguments) != `{"n":2}` {
		t.Errorf("block %+v, args %s", blk, ev2.Arguments)
	}
}

func TestToolResultPatchesAccumulate(t *testing.T) {
	b := newTestBus(t, time.Second)
	b.On(NameToolResult, "redact", func(ctx context.Context, ev Event) (any, error) {
		c := strings.ReplaceAll(ev.(*ToolResult).Content, "secret", "***")
		return &ToolResultPatch{Content: &c}, nil
	})
	b.On(NameToolResult, "flag", func(ctx context.Context, ev Event) (any, error) {
		tr := ev.(*ToolResult)
		if strings.Contains(tr.Content, "secret") {
			t.Errorf("second handler saw the unpatched content %q", tr.Content)
		}
		return &ToolResultPatch{IsError: ptr(true)}, nil
	})
	b.On(NameToolResult, "suffix", func(ctx context.Context, ev Event) (any, error) {
		tr := ev.(*ToolResult)
		if !tr.IsError {
			t.Error("third handler did not see is_error from the second")
		}
		c := tr.Content + "!"
		return &ToolResultPatch{Content: &c}, nil
	})
	ev := &ToolResult{Content: "the secret is out"}
	b.ToolResult(ctxT(t), ev)
	if ev.Content != "the *** is out!" || !ev.IsError {
		t.Errorf("result = %q error=%v", ev.Content, ev.IsError)
	}
}

func TestSessionBeforeFirstCancelWins(t *testing.T) {
	for _, ev := range []Event{&SessionBeforeCompact{Entries: 10}, &SessionBeforeReset{}} {
		t.Run(ev.EventName(), func(t *testing.T) {
			b := newTestBus(t, time.Second)
			var calls []string
			for _, c := range []struct {
				name string
				res  *CancelResult
			}{{"keep", &CancelResult{Cancel: false}}, {"stop", &CancelResult{Cancel: true, Reason: "busy"}}, {"later", &CancelResult{Cancel: true, Reason: "later"}}} {
				b.On(ev.EventName(), c.name, func(ctx context.Context, ev Event) (any, error) {
					calls = append(calls, c.name)
					return c.res, nil
				})
			}
			got := b.SessionBefore(ctxT(t), ev)
			if got == nil || got.Reason != "busy" || !slices.Equal(calls, []string{"keep", "stop"}) {
				t.Errorf("cancel = %+v, calls %q", got, calls)
			}
		})
	}
	if got := newTestBus(t, time.Second).SessionBefore(ctxT(t), &SessionBeforeReset{}); got != nil {
		t.Errorf("no handlers: cancel = %+v", got)
	}
}

func TestBeforeCompactFirstCancelOrSummaryWins(t *testing.T) {
	b := newTestBus(t, time.Second)
	var calls []string
	for _, c := range []struct {
		name string
		res  any
	}{{"nothing", (*CompactResult)(nil)}, {"empty", &CompactResult{Summary: "  "}}, {"old-style", &CancelResult{}},
		{"summary", &CompactResult{Summary: "from a hook"}}, {"later", &CompactResult{Cancel: true}}} {
		b.On(NameSessionBeforeCompact, c.name, func(ctx context.Context, ev Event) (any, error) {
			calls = append(calls, c.name)
			return c.res, nil
		})
	}
	got := b.BeforeCompact(ctxT(t), &SessionBeforeCompact{Entries: 3})
	if got == nil || got.Summary != "from a hook" || got.Cancel || len(calls) != 4 {
		t.Errorf("result = %+v, calls %q", got, calls)
	}

	b = newTestBus(t, time.Second)
	b.On(NameSessionBeforeCompact, "reset-style", func(ctx context.Context, ev Event) (any, error) {
		return &CancelResult{Cancel: true, Reason: "keep it all"}, nil
	})
	if got := b.BeforeCompact(ctxT(t), &SessionBeforeCompact{}); got == nil || !got.Cancel || got.Reason != "keep it all" {
		t.Errorf("a CancelResult handler: %+v", got)
	}
	if got := newTestBus(t, time.Second).BeforeCompact(ctxT(t), &SessionBeforeCompact{}); got != nil {
		t.Errorf("no handlers: %+v", got)
	}
}

func TestBeforeProviderRequestChain(t *testing.T) {
	b := newTestBus(t, time.Second)
	b.On(NameBeforeProviderRequest, "model", func(ctx context.Context, ev Event) (any, error) {
		o := ev.(*BeforeProviderRequest).Options
		o.Model = "small"
		return &ProviderRequestResult{Options: o}, nil
	})
	b.On(NameBeforeProviderRequest, "empty", func(ctx context.Context, ev Event) (any, error) {
		return &ProviderRequestResult{}, nil // changes nothing
	})
	b.On(NameBeforeProviderRequest, "tokens", func(ctx context.Context, ev Event) (any, error) {
		o := ev.(*BeforeProviderRequest).Options
		if o.Model != "small" {
			t.Errorf("third handler sees model %q", o.Model)
		}
		o.MaxTokens = 100
		return &ProviderRequestResult{Options: o}, nil
	})
	got := b.BeforeProviderRequest(ctxT(t), &BeforeProviderRequest{RequestID: "r1", Options: ProviderOptions{Provider: "openai", Model: "big"}})
	if got != (ProviderOptions{Provider: "openai", Model: "small", MaxTokens: 100}) {
		t.Errorf("options = %+v", got)
	}
}

func TestBeforeProviderPayloadChain(t *testing.T) {
	b := newTestBus(t, time.Second)
	b.On(NameBeforeProviderPayload, "a", func(ctx context.Context, ev Event) (any, error) {
		return &ProviderPayloadResult{Payload: json.RawMessage(`{"step":1}`)}, nil
	})
	b.On(NameBeforeProviderPayload, "b", func(ctx context.Context, ev Event) (any, error) {
		if string(ev.(*BeforeProviderPayload).Payload) != `{"step":1}` {
			t.Errorf("second handler sees %s", ev.(*BeforeProviderPayload).Payload)
		}
		return &ProviderPayloadResult{Payload: json.RawMessage(`{"step":2}`)}, nil
	})
	b.On(NameBeforeProviderPayload, "c", func(ctx context.Context, ev Event) (any, error) {
		return &ProviderPayloadResult{}, nil
	})
	if got := b.BeforeProviderPayload(ctxT(t), &BeforeProviderPayload{Payload: json.RawMessage(`{}`)}); string(got) != `{"step":2}` {
		t.Errorf("payload = %s", got)
	}
}

func TestObservationIgnoresResultsAndObserversSeeAll(t *testing.T) {
	b := newTestBus(t, time.Second)
	var seen []string
	b.Observe("obs", func(ctx context.Context, ev Event) { seen = append(seen, "obs:"+ev.EventName()) })
	b.On(NameAgentEnd, "h", func(ctx context.Context, ev Event) (any, error) {
		seen = append(seen, "h:"+ev.EventName())
		return &ReceiveResult{Action: ActionReject}, nil // ignored: agent_end has no result
	})
	b.Emit(ctxT(t), &AgentEnd{Response: "x"})
	b.Emit(ctxT(t), &GatewayStartup{})
	b.Receive(ctxT(t), receiveEvent(channels.TextPart("hi")))
	want := []string{"obs:agent_end", "h:agent_end", "obs:gateway:startup", "obs:message:receive"}
	if !slices.Equal(seen, want) {
		t.Errorf("seen = %q, want %q", seen, want)
	}
	if len(b.Failures()) != 0 {
		t.Errorf("failures: %+v", b.Failures())
	}
}

func TestErrorPanicTimeoutContinue(t *testing.T) {
	cases := []struct {
		name    string
		handler Handler
		want    string
	}{
		{"error", func(ctx context.Context, ev Event) (any, error) {
			return &ReceiveResult{Action: ActionReject, Reason: "ignored with the error"}, errors.New("model unreachable")
		}, "model unreachable"},
		{"panic", func(ctx context.Context, ev Event) (any, error) { panic("boom") }, "panic: boom"},
		{"timeout", func(ctx context.Context, ev Event) (any, error) {
			<-ctx.Done()
			return &ReceiveResult{Action: ActionReject}, nil
		}, "timed out after 50ms"},
		{"wrong type", func(ctx context.Context, ev Event) (any, error) { return &SendResult{}, nil }, "*hooks.SendResult"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newTestBus(t, 50*time.Millisecond)
			b.On(NameMessageReceive, "builtin:bad", c.handler)
			b.On(NameMessageReceive, "builtin:good", func(ctx context.Context, ev Event) (any, error) {
				return &ReceiveResult{Action: ActionTransform, Text: ev.(*MessageReceive).Text + " (seen)"}, nil
			})
			ev := receiveEvent(channels.TextPart("hello"))
			if rej := b.Receive(ctxT(t), ev); rej != nil {
				t.Fatalf("rejected by a failed handler: %+v", rej)
			}
			if ev.Text != "hello (seen)" {
				t.Errorf("text = %q: the chain did not continue as if the bad handler returned nothing", ev.Text)
			}
			f := b.onlyFailure(t, "builtin:bad", c.want)
			if f.event != NameMessageReceive {
				t.Errorf("failure event = %q", f.event)
			}
		})
	}
}

func TestTimedOutHandlerGetsCancelledContext(t *testing.T) {
	b := newTestBus(t, time.Second)
	cancelled := make(chan struct{})
	b.On(NameMessageReceive, "slow", func(ctx context.Context, ev Event) (any, error) {
		<-ctx.Done()
		close(cancelled)
		return nil, ctx.Err()
	}, WithTimeout(20*time.Millisecond)) // its own timeout beats the bus's 1s
	b.Receive(ctxT(t), receiveEvent(channels.TextPart("x")))
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the timed-out handler's ctx was never cancelled")
	}
	b.onlyFailure(t, "slow", "timed out after 20ms")
}

// A handler that outlives its timeout keeps reading its event while the chain goes on
// changing the caller's event; run with -race this fails if they share memory.
func TestLateHandlerDoesNotRaceWithChain(t *testing.T) {
	b := newTestBus(t, 20*time.Millisecond)
	release := make(chan struct{})
	finished := make(chan struct{})
	b.On(NameMessageReceive, "late", func(ctx context.Context, ev Event) (any, error) {
		defer close(finished)
		<-release // ignores ctx on purpose
		m := ev.(*MessageReceive)
		m.Text = "scribbled" // a handler's copy is its own
		_ = len(m.Parts)
		return nil, nil
	})
	b.On(NameMessageReceive, "transform", func(ctx context.Context, ev Event) (any, error) {
		return &ReceiveResult{Action: ActionTransform, Text: "new"}, nil
	})
	ev := receiveEvent(channels.TextPart("old"))
	b.Receive(ctxT(t), ev)
	close(release)
	ev.Text += "!"
	<-finished
	if ev.Text != "new!" {
		t.Errorf("text = %q", ev.Text)
	}
}

func TestCallerCancelIsNotBlamedAndStopsChain(t *testing.T) {
	b := newTestBus(t, 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	var second atomic.Bool
	b.On(NameMessageReceive, "first", func(hctx context.Context, ev Event) (any, error) {
		cancel()
		<-hctx.Done()
		return nil, hctx.Err()
	})
	b.On(NameMessageReceive, "second", func(context.Context, Event) (any, error) {
		second.Store(true)
		return nil, nil
	})
	b.Receive(ctx, receiveEvent(channels.TextPart("x")))
	if second.Load() {
		t.Error("a handler ran after the caller cancelled")
	}
	if fs := b.Failures(); len(fs) != 0 {
		t.Errorf("caller cancel blamed on a hook: %+v", fs)
	}
}

func TestUnsubscribe(t *testing.T) {
	b := newTestBus(t, time.Second)
	var n atomic.Int32
	unsub := b.On(NameAgentEnd, "x", func(context.Context, Event) (any, error) { n.Add(1); return nil, nil })
	unobs := b.Observe("y", func(context.Context, Event) { n.Add(10) })
	b.Emit(ctxT(t), &AgentEnd{})
	unsub()
	unsub() // idempotent
	b.Emit(ctxT(t), &AgentEnd{})
	unobs()
	b.Emit(ctxT(t), &AgentEnd{})
	if n.Load() != 21 {
		t.Errorf("calls = %d, want 11 then 10 then nothing", n.Load())
	}
	if h := b.Handlers(); len(h) != 0 {
		t.Errorf("handlers left: %+v", h)
	}
}

func TestScopeCloseRemovesHandlersAndRunsCleanupsInReverse(t *testing.T) {
	b := newTestBus(t, time.Second)
	other := b.Scope("builtin:other")
	Handle(other, func(ctx context.Context, ev *MessageSend) (*SendResult, error) {
		return &SendResult{Parts: []channels.Part{channels.TextPart("other")}}, nil
	})
	s := b.Scope("dir:/hooks/x")
	var order []string
	Handle(s, func(ctx context.Context, ev *MessageSend) (*SendResult, error) {
		return &SendResult{Parts: []channels.Part{channels.TextPart("mine")}}, nil
	})
	s.Observe(func(context.Context, Event) { order = append(order, "observed") })
	s.Defer(func() { order = append(order, "first") })
	s.Defer(func() { order = append(order, "second") })
	if got := channels.JoinText(b.Send(ctxT(t), &MessageSend{})); got != "other\nmine" {
		t.Fatalf("before close: %q", got)
	}
	s.Close()
	s.Close()
	if got := channels.JoinText(b.Send(ctxT(t), &MessageSend{})); got != "other" {
		t.Errorf("after close: %q", got)
	}
	if !slices.Equal(order, []string{"observed", "second", "first"}) {
		t.Errorf("order = %q", order)
	}
	// A closed scope registers nothing and runs late cleanups at once.
	s.On(NameMessageSend, func(context.Context, Event) (any, error) { return nil, nil })
	s.Defer(func() { order = append(order, "late") })
	if order[len(order)-1] != "late" {
		t.Error("cleanup added after Close did not run")
	}
	for _, h := range b.Handlers() {
		if h.Source == s.Source() {
			t.Errorf("closed scope still has %+v", h)
		}
	}
}

func TestHandleTypedNilIsNoResult(t *testing.T) {
	b := newTestBus(t, time.Second)
	s := b.Scope("typed")
	Handle(s, func(ctx context.Context, ev *MessageReceive) (*ReceiveResult, error) { return nil, nil })
	ev := receiveEvent(channels.TextPart("x"))
	if rej := b.Receive(ctxT(t), ev); rej != nil || ev.Text != "x" || len(b.Failures()) != 0 {
		t.Errorf("rej %+v text %q failures %+v", rej, ev.Text, b.Failures())
	}
}

func TestForProfile(t *testing.T) {
	b := newTestBus(t, time.Second)
	var seen []string
	b.On(NameMessageReceive, "p", func(ctx context.Context, ev Event) (any, error) {
		seen = append(seen, "on:"+ev.(*MessageReceive).Profile)
		return nil, nil
	}, ForProfile("support"))
	b.Observe("o", func(ctx context.Context, ev Event) { seen = append(seen, "obs:"+ev.EventName()) }, ForProfile("support"))
	for _, p := range []string{"assistant", "support"} {
		ev := receiveEvent(channels.TextPart("x"))
		ev.Profile = p
		b.Receive(ctxT(t), ev)
	}
	b.Emit(ctxT(t), &GatewayStartup{}) // no session: not seen
	if want := []string{"obs:message:receive", "on:support"}; !slices.Equal(seen, want) {
		t.Errorf("seen = %q, want %q", seen, want)
	}
	if h := b.Handlers(); len(h) != 2 || h[0].Profile != "support" || h[1].Event != "*" {
		t.Errorf("handlers = %+v", h)
	}
}

func TestHandlersListsInRegistrationOrder(t *testing.T) {
	b := newTestBus(t, time.Second)
	noop := func(context.Context, Event) (any, error) { return nil, nil }
	b.On(NameMessageSend, "builtin:tts", noop)
	b.On(NameMessageReceive, "builtin:stt", noop)
	b.Observe("dir:/h/log", func(context.Context, Event) {})
	b.On(NameMessageReceive, "dir:/h/filter", noop)
	got := b.Handlers()
	want := []HandlerInfo{
		{Source: "builtin:tts", Event: NameMessageSend},
		{Source: "builtin:stt", Event: NameMessageReceive},
		{Source: "dir:/h/log", Event: "*"},
		{Source: "dir:/h/filter", Event: NameMessageReceive},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("handlers = %+v", got)
	}
}

func TestNilBusEmitsToNobody(t *testing.T) {
	var b *Bus
	ev := receiveEvent(channels.TextPart("a"), channels.TextPart("b"))
	if rej := b.Receive(ctxT(t), ev); rej != nil || ev.Text != "a\nb" {
		t.Errorf("rej %+v text %q", rej, ev.Text)
	}
	b.Emit(ctxT(t), &GatewayStop{})
	if parts := b.Send(ctxT(t), &MessageSend{}); parts != nil {
		t.Errorf("parts = %+v", parts)
	}
}

func TestReceiveNoHandlersDoesNotAllocate(t *testing.T) {
	b := NewBus(Options{})
	ev := receiveEvent(channels.TextPart("hello"), audio)
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { b.Receive(ctx, ev) }); n != 0 {
		t.Errorf("Receive with no handlers: %v allocs", n)
	}
	stop := &GatewayStop{}
	if n := testing.AllocsPerRun(100, func() { b.Emit(ctx, stop) }); n != 0 {
		t.Errorf("Emit with no handlers: %v allocs", n)
	}
}

func BenchmarkReceive(b *testing.B) {
	for _, n := range []int{0, 1, 5} {
		b.Run(map[int]string{0: "handlers=0", 1: "handlers=1", 5: "handlers=5"}[n], func(b *testing.B) {
			bus := NewBus(Options{})
			for i := range n {
				bus.On(NameMessageReceive, "bench", func(ctx context.Context, ev Event) (any, error) {
					if i == 0 {
						return &ReceiveResult{Action: ActionContinue}, nil
					}
					return nil, nil
				})
			}
			ctx := context.Background()
			ev := receiveEvent(channels.TextPart("hello"))
			b.ReportAllocs()
			for b.Loop() {
				if bus.Receive(ctx, ev) != nil {
					b.Fatal("rejected")
				}
			}
		})
	}
}
