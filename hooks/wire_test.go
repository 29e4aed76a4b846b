package hooks

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gateway/channels"
)

func TestEncodeMessageReceiveAsDesigned(t *testing.T) {
	ev := &MessageReceive{
		Session: Session{Channel: "telegram", ChatID: "123", UserID: "42"},
		Text:    "hello",
		Parts: []channels.Part{channels.TextPart("hello"),
			{Type: channels.PartAudio, MIME: "audio/ogg", Path: "/tmp/v.ogg", Data: []byte("not on the wire")}},
	}
	data, err := Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), `{"type":"message:receive","version":1,`) {
		t.Errorf("does not start with type and version: %s", data)
	}
	if strings.Contains(string(data), "not on the wire") {
		t.Error("in-memory Data was encoded")
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, data)
	}
	for k, want := range map[string]any{"type": "message:receive", "version": 1.0, "channel": "telegram", "chat_id": "123",
		"thread_id": "", "user_id": "42", "text": "hello"} {
		if got[k] != want {
			t.Errorf("%s = %#v, want %#v", k, got[k], want)
		}
	}
	parts, _ := got["parts"].([]any)
	if len(parts) != 2 {
		t.Fatalf("parts = %#v", got["parts"])
	}
	if p := parts[1].(map[string]any); p["type"] != "audio" || p["mime"] != "audio/ogg" || p["path"] != "/tmp/v.ogg" {
		t.Errorf("audio part = %#v", p)
	}
}

func TestEncodeMessageSendAsDesigned(t *testing.T) {
	data, err := Encode(&MessageSend{Session: Session{Channel: "web", ChatID: "c"}, InputText: "in", ResponseText: "out"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"type": "message:send", "version": 1.0, "channel": "web", "chat_id": "c",
		"input_text": "in", "response_text": "out", "is_voice": false} {
		if got[k] != want {
			t.Errorf("%s = %#v, want %#v", k, got[k], want)
		}
	}
}

func TestEncodeEmptyEvent(t *testing.T) {
	data, err := Encode(&SessionBeforeReset{})
	if err != nil || !json.Valid(data) {
		t.Fatalf("%s %v", data, err)
	}
	data, err = Encode(&MessageReceive{})
	if err != nil || !strings.Contains(string(data), `"parts":[]`) {
		t.Errorf("message without parts: %s %v", data, err)
	}
	if _, err := Encode(nil); err == nil {
		t.Error("nil event encoded")
	}
}

// eventNameConsts reads the Name* constants of events.go, so that an event added there
// but not to the catalogue fails this test.
func eventNameConsts(t *testing.T) []string {
	f, err := parser.ParseFile(token.NewFileSet(), "events.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Name") || len(vs.Values) != 1 {
			return true
		}
		if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
			s, _ := strconv.Unquote(lit.Value)
			names = append(names, s)
		}
		return true
	})
	return names
}

func TestCatalogueIsComplete(t *testing.T) {
	cat := Catalogue()
	var names []string
	for _, e := range cat {
		names = append(names, e.Name)
		if got := e.NewEvent().EventName(); got != e.Name {
			t.Errorf("%s: NewEvent makes %q", e.Name, got)
		}
		if e.HasResult != (e.NewResult != nil) || e.HasResult == (e.Reducer == "observe") {
			t.Errorf("%s: HasResult %v, NewResult %v, reducer %q disagree", e.Name, e.HasResult, e.NewResult != nil, e.Reducer)
		}
		if e.HasResult {
			if v := reflect.ValueOf(e.NewResult()); v.Kind() != reflect.Pointer || v.IsNil() {
				t.Errorf("%s: NewResult returns %T", e.Name, e.NewResult())
			}
		}
		for _, k := range topLevelJSONKeys(reflect.TypeOf(e.NewEvent()).Elem()) {
			if k == "type" || k == "version" {
				t.Errorf("%s: field %q clashes with the wire envelope", e.Name, k)
			}
		}
	}
	want := eventNameConsts(t)
	if len(want) < 20 {
		t.Fatalf("found only %d Name constants in events.go", len(want))
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(names))
	if !slices.Equal(got, want) {
		t.Errorf("catalogue %q\nevents.go %q", got, want)
	}
	cat[0].Name = "changed"
	if Catalogue()[0].Name == "changed" {
		t.Error("Catalogue shares its slice between calls")
	}
}

func topLevelJSONKeys(t reflect.Type) []string {
	var keys []string
	for f := range t.Fields() {
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && tag == "" {
			keys = append(keys, topLevelJSONKeys(f.Type)...)
			continue
		}
		if tag == "-" {
			continue // not on the wire
		}
		if tag == "" {
			tag = f.Name
		}
		keys = append(keys, tag)
	}
	return keys
}

func TestDecodeResult(t *testing.T) {
	ok := []struct {
		event, in string
		want      any
	}{
		{NameMessageReceive, "", nil},
		{NameMessageReceive, " \n\t", nil},
		{NameMessageReceive, "null\n", nil},
		{NameMessageReceive, `{"action":"continue"}`, &ReceiveResult{Action: ActionContinue}},
		{NameMessageReceive, "\n{\"action\": \"reject\", \"reason\": \"no\"}\n", &ReceiveResult{Action: ActionReject, Reason: "no"}},
		{NameMessageReceive, `{"action":"transform","text":"t","is_voice":true}`, &ReceiveResult{Action: ActionTransform, Text: "t", IsVoice: ptr(true)}},
		{NameMessageSend, `{"parts":[{"type":"text","text":"x"},{"type":"audio","path":"/a.ogg"}]}`,
			&SendResult{Parts: []channels.Part{channels.TextPart("x"), {Type: channels.PartAudio, Path: "/a.ogg"}}}},
		{NameToolCall, `{"block":true,"reason":"r"}`, &ToolCallResult{Block: true, Reason: "r"}},
		{NameSessionBeforeCompact, `{"cancel":true}`, &CompactResult{Cancel: true}},
		{NameSessionBeforeCompact, `{"summary":"s"}`, &CompactResult{Summary: "s"}},
		{NameAgentEnd, `anything at all`, nil}, // observation: output ignored
	}
	for _, c := range ok {
		got, err := DecodeResult(c.event, []byte(c.in))
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("DecodeResult(%s, %q) = %#v, %v; want %#v", c.event, c.in, got, err, c.want)
		}
	}
	bad := []struct {
		event, in, want string
	}{
		{NameMessageReceive, "not json", "want a JSON object"},
		{NameMessageReceive, `["continue"]`, "want a JSON object"},
		{NameMessageReceive, `{"action":"continue"} {"action":"reject"}`, "more than one JSON value"},
		{NameMessageReceive, `{"action":"continue"`, "unexpected EOF"},
		{NameMessageReceive, `{"action":"transfrom"}`, `unknown action "transfrom"`},
		{NameMessageReceive, `{"reason":"x"}`, `"action" is missing`},
		{NameMessageReceive, `{"action":"continue","txt":"x"}`, `unknown field "txt"`},
		{NameMessageSend, `{"parts":[{"type":"audio"}]}`, `part 0 (audio) has no "path"`},
		{NameMessageSend, `{"parts":[{"type":"video","path":"/v"}]}`, `unknown type "video"`},
		{NameToolCall, `{"block":"yes"}`, "cannot unmarshal"},
		{"message:recieve", `{}`, `unknown event "message:recieve"`},
	}
	for _, c := range bad {
		got, err := DecodeResult(c.event, []byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeResult(%s, %q) = %#v, %v; want an error with %q", c.event, c.in, got, err, c.want)
		}
	}
}
