package hooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"gateway/channels"
	"gateway/internal/llm"
)

// The events reference in docs/hooks.md is generated from the real types. When a type
// changes, this test fails; rerun it with GATEWAY_UPDATE_DOCS=1 to rewrite the section.

const (
	docsPath   = "../docs/hooks.md"
	beginMark  = "<!-- BEGIN GENERATED: events (go test ./hooks -run TestDocs with GATEWAY_UPDATE_DOCS=1) -->"
	endMark    = "<!-- END GENERATED: events -->"
	updateDocs = "GATEWAY_UPDATE_DOCS"
)

// docExamples returns, per event, a filled example event and example results.
func docExamples() map[string]struct {
	ev      Event
	results []any
} {
	s := Session{SessionKey: "telegram:123", Channel: "telegram", ChatID: "123", ThreadID: "", UserID: "42", Profile: "assistant"}
	temp := 0.2
	call := llm.ToolCall{ID: "call_1", Name: "read_file", Arguments: json.RawMessage(`{"path":"notes.txt"}`)}
	type ex = struct {
		ev      Event
		results []any
	}
	return map[string]ex{
		NameGatewayStartup:    {ev: &GatewayStartup{Channels: []string{"telegram", "web"}}},
		NameGatewayStop:       {ev: &GatewayStop{Reason: "shutdown"}},
		NameGatewayError:      {ev: &GatewayError{Session: s, Stage: "delivery", Error: "telegram: message is too long"}},
		NameChannelConnect:    {ev: &ChannelConnect{Channel: "telegram"}},
		NameChannelDisconnect: {ev: &ChannelDisconnect{Channel: "telegram", Error: "connection reset"}},
		NameMessageReceive: {
			ev: &MessageReceive{Session: s, MessageID: "987", ChatType: channels.ChatGroup, Mentioned: true,
				ReplyTo: &channels.Reply{ID: "986", Text: "Anything else?", UserID: "7", FromBot: true}, Text: "hello", Language: "en",
				Parts: []channels.Part{channels.TextPart("hello"),
					{Type: channels.PartAudio, MIME: "audio/ogg", Path: "/var/lib/gateway/media/987.ogg", Size: 5120, Duration: 2.5, Voice: true}},
				IsVoice: true},
			results: []any{
				&ReceiveResult{Action: ActionContinue},
				&ReceiveResult{Action: ActionTransform, Text: "new text"},
				&ReceiveResult{Action: ActionTransform, Parts: []channels.Part{channels.TextPart("transcript")}, IsVoice: ptr(true)},
				&ReceiveResult{Action: ActionReject, Reason: "shown to the user"},
			},
		},
		NameMessageSend: {
			ev: &MessageSend{Session: s, InputText: "hello", ResponseText: "Hi! How can I help?", IsVoice: true,
				TTSMode: "inbound", Voice: "alloy", Language: "en"},
			results: []any{&SendResult{Parts: []channels.Part{channels.TextPart("appended before done"),
				{Type: channels.PartAudio, MIME: "audio/ogg", Path: "/tmp/answer.ogg", Voice: true}}}},
		},
		NameMessageCancel: {ev: &MessageCancel{Session: s, Reason: "stopped by the user"}},
		NameAgentStart:    {ev: &AgentStart{Session: s, Prompt: "hello"}},
		NameAgentEnd:      {ev: &AgentEnd{Session: s, Response: "Hi! How", Error: "stopped by /stop", Aborted: true}},
		NameTurnStart:     {ev: &TurnStart{Session: s, Turn: 1}},
		NameTurnEnd: {ev: &TurnEnd{Session: s, Turn: 1,
			Message: llm.Message{Role: llm.RoleAssistant, Content: "", ToolCalls: []llm.ToolCall{call}},
			Results: []llm.Message{{Role: llm.RoleTool, Content: "buy milk", ToolCallID: "call_1", Name: "read_file"}}}},
		NameMessageUpdate: {ev: &MessageUpdate{Session: s, Delta: "Hi! How"}},
		NameMessageEnd:    {ev: &MessageEnd{Session: s, Message: llm.Message{Role: llm.RoleAssistant, Content: "Hi! How can I help?"}}},
		NameToolCall: {
			ev: &ToolCall{Session: s, ToolCallID: "call_1", Tool: "read_file", Arguments: json.RawMessage(`{"path":"notes.txt"}`)},
			results: []any{&ToolCallResult{Block: true, Reason: "files are off limits in this chat"},
				&ToolCallResult{Arguments: json.RawMessage(`{"path":"public/notes.txt"}`)}},
		},
		NameToolResult: {
			ev:      &ToolResult{Session: s, ToolCallID: "call_1", Tool: "read_file", Arguments: json.RawMessage(`{"path":"notes.txt"}`), Content: "buy milk"},
			results: []any{&ToolResultPatch{Content: ptr("buy oat milk"), IsError: ptr(false)}},
		},
		NameContext: {
			ev: &Context{Session: s, Messages: []llm.Message{{Role: llm.RoleSystem, Content: "You are helpful."}, {Role: llm.RoleUser, Content: "What is in this picture?",
				Parts: []llm.Part{{Type: llm.PartImage, MIME: "image/jpeg", Path: "/var/lib/gateway/media/2026-11-24/k3j9-photo.jpg", Name: "photo.jpg", Size: 183204}}}},
				Entries: []json.RawMessage{
					json.RawMessage(`{"type":"message","id":"a1b2c3d4e5f60718","parentId":null,"timestamp":"2026-01-02T10:00:00Z","message":{"role":"user","content":"hello"}}`),
					json.RawMessage(`{"type":"stack_pop","id":"b2c3d4e5f6071829","parentId":"a1b2c3d4e5f60718","timestamp":"2026-01-02T10:01:00Z","popped":["..."],"summary":"..."}`)}},
			results: []any{&ContextResult{Messages: []llm.Message{{Role: llm.RoleSystem, Content: "You are brief."}, {Role: llm.RoleUser, Content: "hello"}}}},
		},
		NameBeforeAgentStart: {
			ev:      &BeforeAgentStart{Session: s, Prompt: "hello", SystemPrompt: "You are helpful."},
			results: []any{&BeforeAgentStartResult{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Today is Monday."}}, SystemPrompt: ptr("You are helpful and brief.")}},
		},
		NameSessionBeforeCompact: {ev: &SessionBeforeCompact{Session: s, Entries: 2, TokensBefore: 101500, Reason: CompactThreshold,
			Instructions: "keep the dates", PreviousSummary: "Ann planned a trip to Rome.",
			Messages: []llm.Message{{Role: llm.RoleUser, Content: "Book the 9:40 train."}, {Role: llm.RoleAssistant, Content: "Done: seat 42."}}},
			results: []any{&CompactResult{Cancel: true, Reason: "keep the full history"},
				&CompactResult{Summary: "Ann planned a trip to Rome and booked the 9:40 train (seat 42)."}}},
		NameSessionCompact: {ev: &SessionCompact{Session: s, Reason: CompactThreshold, Summary: "Ann planned a trip to Rome and booked the 9:40 train (seat 42).",
			FirstKeptEntryID: "a1b2c3d4e5f60718", TokensBefore: 101500, TokensAfter: 20400, FromHook: true}},
		NameSessionBeforeReset: {ev: &SessionBeforeReset{Session: s},
			results: []any{&CancelResult{Cancel: true, Reason: "this chat keeps its history"}}},
		NameBeforeProviderRequest: {
			ev:      &BeforeProviderRequest{Session: s, RequestID: "req_7", Options: ProviderOptions{Provider: "openai", Model: "gpt-4o-mini", MaxTokens: 1024, Temperature: &temp}},
			results: []any{&ProviderRequestResult{Options: ProviderOptions{Model: "gpt-4o"}}},
		},
		NameBeforeProviderPayload: {
			ev:      &BeforeProviderPayload{Session: s, RequestID: "req_7", Payload: json.RawMessage(`{"model":"gpt-4o-mini","messages":[]}`)},
			results: []any{&ProviderPayloadResult{Payload: json.RawMessage(`{"model":"gpt-4o-mini","messages":[],"user":"42"}`)}},
		},
		NameCommand: {
			ev: &Command{Session: s, Name: "pop", Args: []string{"2"}, ArgsRaw: "2", Entries: []json.RawMessage{
				json.RawMessage(`{"type":"message","id":"a1b2c3d4e5f60718","parentId":null,"timestamp":"2026-01-02T10:00:00Z","message":{"role":"user","content":"hello"}}`)}},
			results: []any{&CommandResult{Text: "Went back 2 turns."},
				&CommandResult{Prompt: "Summarise our conversation so far."},
				&CommandResult{Text: "Went back 2 turns.", Entries: []json.RawMessage{json.RawMessage(`{"type":"stack_pop","popped":["a1b2c3d4e5f60718"],"summary":"hello"}`)}}},
		},
		NameTool: {
			ev:      &Tool{Session: s, Name: "lookup_order", ToolCallID: "call_1", Arguments: json.RawMessage(`{"id":"A-17"}`)},
			results: []any{&ToolOutput{Content: "order A-17: shipped on 2 January"}, &ToolOutput{Content: "no order A-99", IsError: true}},
		},
		NameAfterProviderResponse: {ev: &AfterProviderResponse{Session: s, RequestID: "req_7", Status: 200,
			Headers: map[string]string{"x-request-id": "abc"}}},
	}
}

// generatedEvents renders the events reference from the catalogue and the examples.
func generatedEvents(t *testing.T) string {
	examples := docExamples()
	var b strings.Builder
	for _, info := range Catalogue() {
		ex, ok := examples[info.Name]
		if !ok {
			t.Fatalf("docExamples has no example for %s", info.Name)
		}
		if ex.ev.EventName() != info.Name || (len(ex.results) > 0) != info.HasResult {
			t.Fatalf("example for %s does not fit the catalogue", info.Name)
		}
		data, err := Encode(ex.ev)
		if err != nil {
			t.Fatal(err)
		}
		// Every field must show in the docs, so an example leaving an omitempty field
		// empty (or a new field nobody documented) fails here.
		var keys map[string]any
		json.Unmarshal(data, &keys)
		for _, k := range topLevelJSONKeys(reflect.TypeOf(ex.ev).Elem()) {
			if _, ok := keys[k]; !ok {
				t.Errorf("the example for %s does not show field %q: fill it in docExamples", info.Name, k)
			}
		}
		var ind bytes.Buffer
		json.Indent(&ind, data, "", "  ")
		fmt.Fprintf(&b, "### `%s`\n\n", info.Name)
		if info.HasResult {
			fmt.Fprintf(&b, "Reducer: %s.\n\n", info.Reducer)
		} else {
			b.WriteString("Observation: handlers run, results are ignored.\n\n")
		}
		fmt.Fprintf(&b, "```json\n%s\n```\n\n", ind.String())
		if !info.HasResult {
			continue
		}
		res := info.NewResult()
		fmt.Fprintf(&b, "Result (`%s`):\n\n```json\n", reflect.TypeOf(res).Elem().Name())
		for _, r := range ex.results {
			if reflect.TypeOf(r) != reflect.TypeOf(res) {
				t.Fatalf("example result %T for %s, want %T", r, info.Name, res)
			}
			out, _ := json.Marshal(r)
			// Round trip through DecodeResult, so every documented result really decodes.
			if _, err := DecodeResult(info.Name, out); err != nil {
				t.Fatalf("documented result for %s does not decode: %v", info.Name, err)
			}
			fmt.Fprintf(&b, "%s\n", out)
		}
		b.WriteString("```\n\n")
	}
	return b.String()
}

func TestDocsMatchTypes(t *testing.T) {
	doc, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	i, j := strings.Index(text, beginMark), strings.Index(text, endMark)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the generated-section markers", docsPath)
	}
	want := "\n\n" + generatedEvents(t)
	if got := text[i+len(beginMark) : j]; got != want {
		if os.Getenv(updateDocs) == "1" {
			text = text[:i+len(beginMark)] + want + text[j:]
			if err := os.WriteFile(docsPath, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s disagrees with the event types; run: %s=1 go test ./hooks -run TestDocs", docsPath, updateDocs)
	}
}

// The worked examples of docs/hooks.md are real hooks: each block after a
// "<!-- file: PATH -->" line is written to PATH and the hooks are loaded and run.
func TestDocsExamplesWork(t *testing.T) {
	doc, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	blocks := regexp.MustCompile("(?s)<!-- file: ([^ ]+) -->\n```[a-z]*\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 4 {
		t.Fatalf("found %d example files in %s", len(blocks), docsPath)
	}
	for _, m := range blocks {
		path := filepath.Join(root, m[1])
		os.MkdirAll(filepath.Dir(path), 0o755)
		mode := os.FileMode(0o644)
		if !strings.HasSuffix(path, ".yaml") {
			mode = 0o755
		}
		if err := os.WriteFile(path, []byte(m[2]), mode); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not installed; CI must install it (.ci/run) to run the Python example")
		}
		os.RemoveAll(filepath.Join(root, "redact-emails"))
		t.Log("python3 not installed: the Python example is not run")
	}
	b := newTestBus(t, 20*time.Second)
	d := loadOne(t, b, root, DirOptions{})
	if len(d.Hooks()) == 0 {
		t.Fatal("no example hook loaded")
	}
	rej := b.Receive(ctxT(t), receiveEvent(channels.TextPart("my password is hunter2")))
	if rej == nil || !strings.Contains(rej.Reason, "password") {
		t.Errorf("shell example: reject = %+v (failures %+v)", rej, b.Failures())
	}
	ev := receiveEvent(channels.TextPart("mail me at ann@example.com"))
	if rej := b.Receive(ctxT(t), ev); rej != nil {
		t.Errorf("rejected %+v", rej)
	}
	if _, err := exec.LookPath("python3"); err == nil && ev.Text != "mail me at [email]" {
		t.Errorf("python example: text = %q (failures %+v)", ev.Text, b.Failures())
	}
	if fs := b.Failures(); len(fs) != 0 {
		t.Errorf("failures: %+v", fs)
	}
}
