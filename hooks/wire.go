package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"gateway/channels"
)

// EventInfo describes one event of the catalogue.
type EventInfo struct {
	Name string
	// Reducer says in a few words how results combine ("observe" when they are ignored).
	Reducer string
	// HasResult tells whether handlers of this event may return a result.
	HasResult bool
	// NewEvent returns a zero event of this name.
	NewEvent func() Event
	// NewResult returns a zero result to decode into (e.g. new(ReceiveResult)); nil when
	// HasResult is false.
	NewResult func() any
	// Declared marks the events of commands and tools: only the hook that declared one in
	// HOOK.yaml gets it, and no hook lists it under events.
	Declared bool
}

// Catalogue lists every event the bus carries, in a stable order. It builds a fresh slice
// on each call.
func Catalogue() []EventInfo {
	observe := func(name string, ev func() Event) EventInfo {
		return EventInfo{Name: name, Reducer: "observe", NewEvent: ev}
	}
	result := func(name, reducer string, ev func() Event, res func() any) EventInfo {
		return EventInfo{Name: name, Reducer: reducer, HasResult: true, NewEvent: ev, NewResult: res}
	}
	declared := func(name, reducer string, ev func() Event, res func() any) EventInfo {
		e := result(name, reducer, ev, res)
		e.Declared = true
		return e
	}
	return []EventInfo{
		observe(NameGatewayStartup, func() Event { return new(GatewayStartup) }),
		observe(NameGatewayStop, func() Event { return new(GatewayStop) }),
		observe(NameGatewayError, func() Event { return new(GatewayError) }),
		observe(NameChannelConnect, func() Event { return new(ChannelConnect) }),
		observe(NameChannelDisconnect, func() Event { return new(ChannelDisconnect) }),
		result(NameMessageReceive, "chain; first reject stops",
			func() Event { return new(MessageReceive) }, func() any { return new(ReceiveResult) }),
		result(NameMessageSend, "collect parts in order",
			func() Event { return new(MessageSend) }, func() any { return new(SendResult) }),
		observe(NameMessageCancel, func() Event { return new(MessageCancel) }),
		observe(NameAgentStart, func() Event { return new(AgentStart) }),
		observe(NameAgentEnd, func() Event { return new(AgentEnd) }),
		observe(NameTurnStart, func() Event { return new(TurnStart) }),
		observe(NameTurnEnd, func() Event { return new(TurnEnd) }),
		observe(NameMessageUpdate, func() Event { return new(MessageUpdate) }),
		observe(NameMessageEnd, func() Event { return new(MessageEnd) }),
		result(NameToolCall, "in order; first block wins",
			func() Event { return new(ToolCall) }, func() any { return new(ToolCallResult) }),
		result(NameToolResult, "patches accumulate",
			func() Event { return new(ToolResult) }, func() any { return new(ToolResultPatch) }),
		result(NameContext, "chain the messages",
			func() Event { return new(Context) }, func() any { return new(ContextResult) }),
		result(NameBeforeAgentStart, "collect messages; chain the system prompt",
			func() Event { return new(BeforeAgentStart) }, func() any { return new(BeforeAgentStartResult) }),
		result(NameSessionBeforeCompact, "first cancel or summary wins",
			func() Event { return new(SessionBeforeCompact) }, func() any { return new(CompactResult) }),
		observe(NameSessionCompact, func() Event { return new(SessionCompact) }),
		result(NameSessionBeforeReset, "first cancel wins",
			func() Event { return new(SessionBeforeReset) }, func() any { return new(CancelResult) }),
		result(NameBeforeProviderRequest, "chain the options",
			func() Event { return new(BeforeProviderRequest) }, func() any { return new(ProviderRequestResult) }),
		result(NameBeforeProviderPayload, "chain the payload",
			func() Event { return new(BeforeProviderPayload) }, func() any { return new(ProviderPayloadResult) }),
		observe(NameAfterProviderResponse, func() Event { return new(AfterProviderResponse) }),
		declared(NameCommand, "the declaring hook answers",
			func() Event { return new(Command) }, func() any { return new(CommandResult) }),
		declared(NameTool, "the declaring hook answers",
			func() Event { return new(Tool) }, func() any { return new(ToolOutput) }),
	}
}

// LookupEvent returns the catalogue entry of the named event.
func LookupEvent(name string) (EventInfo, bool) {
	for _, e := range Catalogue() {
		if e.Name == name {
			return e, true
		}
	}
	return EventInfo{}, false
}

// Encode returns the wire form of ev that hook programs read: the event's JSON with "type"
// (its name) and "version" (WireVersion) first at the top level.
//
// Parts carry media by Path only: Data is not encoded. Code that hands an event with
// in-memory parts to a program must first put them in files (the hook-directory runner
// does this for message:receive).
func Encode(ev Event) ([]byte, error) {
	if ev == nil {
		return nil, errors.New("encode hook event: nil event")
	}
	if m, ok := ev.(*MessageReceive); ok && m.Parts == nil {
		c := *m // programs may loop over parts: give them [], not null
		c.Parts = []channels.Part{}
		ev = &c
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", ev.EventName(), err)
	}
	if len(body) < 2 || body[0] != '{' {
		return nil, fmt.Errorf("encode %s event: not a JSON object", ev.EventName())
	}
	name, _ := json.Marshal(ev.EventName()) // a string always marshals
	var out bytes.Buffer
	out.Grow(len(body) + len(name) + 32)
	out.WriteString(`{"type":`)
	out.Write(name)
	fmt.Fprintf(&out, `,"version":%d`, WireVersion)
	if len(body) > 2 { // not "{}"
		out.WriteByte(',')
	}
	out.Write(body[1:])
	return out.Bytes(), nil
}

// DecodeResult turns what a hook program wrote (stdout, or an HTTP response body) into the
// typed result of the named event, e.g. *ReceiveResult for message:receive.
//
// Empty or whitespace-only output, and JSON null, mean "no result" (nil, nil); so does any
// output for an event whose results are ignored. Otherwise the output must be one JSON
// object with only the result's fields; anything else is an error saying what is wrong.
func DecodeResult(event string, data []byte) (any, error) {
	info, ok := LookupEvent(event)
	if !ok {
		return nil, fmt.Errorf("unknown event %q", event)
	}
	if !info.HasResult {
		return nil, nil
	}
	return decodeInto(event, info.NewResult(), data)
}

// decodeInto decodes data over res (which may hold defaults) and validates it.
func decodeInto(event string, res any, data []byte) (any, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || string(data) == "null" {
		return nil, nil
	}
	if data[0] != '{' {
		return nil, fmt.Errorf("%s result: want a JSON object like %s, got %s", event, resultHint(event), snippet(data))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // a misspelt field would otherwise be silently ignored
	if err := dec.Decode(res); err != nil {
		return nil, fmt.Errorf("%s result: %w (got %s)", event, err, snippet(data))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s result: more than one JSON value (got %s)", event, snippet(data))
	}
	if err := validateResult(res); err != nil {
		return nil, fmt.Errorf("%s result: %w", event, err)
	}
	return res, nil
}

func validateResult(res any) error {
	switch r := res.(type) {
	case *ReceiveResult:
		switch r.Action {
		case ActionContinue, ActionTransform, ActionReject:
		case "":
			return fmt.Errorf(`"action" is missing: use "continue", "transform" or "reject"`)
		default:
			return fmt.Errorf(`unknown action %q: use "continue", "transform" or "reject"`, r.Action)
		}
		return validateParts(r.Parts)
	case *SendResult:
		return validateParts(r.Parts)
	case *CommandResult:
		for i, e := range r.Entries {
			if err := ValidateEntry(e); err != nil {
				return fmt.Errorf("entry %d: %w", i, err)
			}
		}
	}
	return nil
}

// reservedEntryTypes are the entry types the history's core writes; a custom entry uses
// any other.
var reservedEntryTypes = []string{"session", "message", "leaf", "compaction"}

// ValidateEntry checks a custom entry: a JSON object whose "type" is a non-empty string
// the core does not use.
func ValidateEntry(e json.RawMessage) error {
	var head map[string]json.RawMessage
	if err := json.Unmarshal(e, &head); err != nil || head == nil {
		return fmt.Errorf("want a JSON object with a \"type\", got %s", snippet(e))
	}
	var typ string
	if err := json.Unmarshal(head["type"], &typ); err != nil || typ == "" {
		return fmt.Errorf(`"type" is missing or not a string: name the entry's kind, e.g. "stack_pop"`)
	}
	for _, r := range reservedEntryTypes {
		if typ == r {
			return fmt.Errorf("type %q is the history's own; use a name of yours", typ)
		}
	}
	return nil
}

// validateParts checks parts that came over the wire, where media can only be a file.
func validateParts(parts []channels.Part) error {
	for i, p := range parts {
		switch p.Type {
		case channels.PartText:
		case channels.PartAudio, channels.PartImage, channels.PartFile:
			if p.Path == "" {
				return fmt.Errorf("part %d (%s) has no \"path\"", i, p.Type)
			}
		case "":
			return fmt.Errorf("part %d has no \"type\" (text, audio, image or file)", i)
		default:
			return fmt.Errorf("part %d has unknown type %q (text, audio, image or file)", i, p.Type)
		}
	}
	return nil
}

func resultHint(event string) string {
	switch event {
	case NameMessageReceive:
		return `{"action": "continue"}`
	case NameMessageSend:
		return `{"parts": [...]}`
	}
	return "{...}"
}

// snippet quotes the start of bad output for an error message.
func snippet(b []byte) string {
	const max = 120
	if len(b) > max {
		return fmt.Sprintf("%q...", b[:max])
	}
	return fmt.Sprintf("%q", b)
}
