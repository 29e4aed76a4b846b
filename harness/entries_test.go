package harness_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"gateway/harness"
	"gateway/hooks"
	"gateway/internal/llm"
)

// Custom entries are saved on the branch, kept across a reopen, ignored by the model and
// handed to context hooks beside the messages, in order.
func TestCustomEntries(t *testing.T) {
	dir := t.TempDir()
	st, err := harness.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	bus := hooks.NewBus(hooks.Options{})
	var seen [][]json.RawMessage
	bus.On(hooks.NameContext, "test", func(ctx context.Context, ev hooks.Event) (any, error) {
		seen = append(seen, ev.(*hooks.Context).Entries)
		return nil, nil
	})
	fake := harness.NewFake()
	open := func() *harness.Session {
		s, err := harness.OpenSession(harness.SessionOptions{Key: "t:1", Store: st, Provider: fake, Bus: bus})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ctx := context.Background()
	s := open()
	if _, err := s.Run(ctx, "one", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEntries([]json.RawMessage{json.RawMessage(`{"type":"message"}`)}); err == nil {
		t.Error("a custom entry may not take the type message")
	}
	if err := s.AppendEntries([]json.RawMessage{json.RawMessage(`{"type":"bookmark","label":"here"}`)}); err != nil {
		t.Fatal(err)
	}
	s = open() // from the file
	got, err := s.Entries()
	if err != nil {
		t.Fatal(err)
	}
	types := func(es []json.RawMessage) string {
		var out []string
		for _, e := range es {
			var h struct {
				Type    string      `json:"type"`
				Label   string      `json:"label"`
				Message llm.Message `json:"message"`
			}
			json.Unmarshal(e, &h)
			out = append(out, h.Type+":"+h.Label+h.Message.Content)
		}
		return strings.Join(out, " ")
	}
	if want := "message:one message:ok bookmark:here"; types(got) != want {
		t.Fatalf("entries after reopen %q, want %q", types(got), want)
	}
	if _, err := s.Run(ctx, "two", nil); err != nil {
		t.Fatal(err)
	}
	if want := "message:one message:ok bookmark:here message:two"; types(seen[len(seen)-1]) != want {
		t.Fatalf("context entries %q, want %q", types(seen[len(seen)-1]), want)
	}
	reqs := fake.Requests()
	for _, m := range reqs[len(reqs)-1].Messages {
		if strings.Contains(m.Content, "here") {
			t.Fatalf("the model saw the custom entry: %+v", reqs[len(reqs)-1].Messages)
		}
	}
	if len(reqs[len(reqs)-1].Messages) != 3 {
		t.Fatalf("request %+v", reqs[len(reqs)-1].Messages)
	}
	s = open()
	got, _ = s.Entries()
	if want := "message:one message:ok bookmark:here message:two message:ok"; types(got) != want {
		t.Fatalf("entries after the second reopen %q, want %q", types(got), want)
	}
	files, _ := os.ReadDir(dir)
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
}

// The entries hooks see are the history file's: each message entry has its id, its parent
// (the one before it; null for the first) and its timestamp, in memory as after a reopen.
func TestEntriesCarryParentAndTimestamp(t *testing.T) {
	st, err := harness.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	open := func() *harness.Session {
		s, err := harness.OpenSession(harness.SessionOptions{Key: "t:1", Store: st, Provider: harness.NewFake()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	check := func(when string, s *harness.Session) {
		t.Helper()
		got, err := s.Entries()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 {
			t.Fatalf("%s: %d entries, want 4", when, len(got))
		}
		var prev *string
		for i, raw := range got {
			var e struct {
				ID        string  `json:"id"`
				ParentID  *string `json:"parentId"`
				Timestamp string  `json:"timestamp"`
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatal(err)
			}
			if _, err := time.Parse(time.RFC3339Nano, e.Timestamp); err != nil {
				t.Errorf("%s: entry %d has timestamp %q: %s", when, i, e.Timestamp, raw)
			}
			if (prev == nil) != (e.ParentID == nil) || prev != nil && *prev != *e.ParentID {
				t.Errorf("%s: entry %d has parentId %v, want the entry before it (%v): %s", when, i, e.ParentID, prev, raw)
			}
			prev = &e.ID
		}
	}
	s := open()
	for _, q := range []string{"one", "two"} {
		if _, err := s.Run(context.Background(), q, nil); err != nil {
			t.Fatal(err)
		}
	}
	check("in memory", s)
	check("after a reopen", open())
}
