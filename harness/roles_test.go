package harness_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"gateway/harness"
	"gateway/harness/openaitest"
	"gateway/hooks"
	"gateway/internal/llm"
	"gateway/internal/media/mediatest"
)

// consecutive is the index of the first of two user (or two assistant) messages in a row
// in a recorded request, -1 when the roles alternate.
func consecutive(msgs []openaitest.Message) int {
	for i := 1; i < len(msgs); i++ {
		if r := msgs[i].Role; (r == "user" || r == "assistant") && msgs[i-1].Role == r {
			return i - 1
		}
	}
	return -1
}

// A model whose chat template wants the roles to alternate (Mistral or Gemma served by
// vLLM) gets consecutive user messages as one. After a turn whose model call failed, the
// next message is answered rather than refused, and the model reads both messages, the
// photo of the second with it.
func TestMessagesAfterAFailedTurnReachAStrictModelAsOne(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.AlternateRoles(true)
	srv.Push(openaitest.Reply{Status: 500, Message: "the model crashed"}, openaitest.Reply{Text: "Lima; a photo in four colours."})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv), MaxRetries: -1})
	if _, err := s.Run(context.Background(), "What is the capital of Peru?", nil); err == nil {
		t.Fatal("the failed call did not fail the turn")
	}
	photo := writeFile(t, t.TempDir(), "photo.jpg", mediatest.JPEG(640, 480))
	res, err := s.RunWith(context.Background(), "And what is in this photo?",
		[]llm.Part{{Type: llm.PartImage, MIME: "image/jpeg", Path: photo, Name: "photo.jpg"}}, nil)
	if err != nil || res.Text != "Lima; a photo in four colours." {
		t.Fatalf("the next message: %q %v", res.Text, err)
	}
	reqs := srv.Requests()
	m := reqs[len(reqs)-1].Messages
	if i := consecutive(m); i >= 0 {
		t.Fatalf("messages %d and %d are both %s: %+v", i, i+1, m[i].Role, m)
	}
	if len(m) != 1 || m[0].Content != "What is the capital of Peru?\n\nAnd what is in this photo?" || len(m[0].Images) != 1 {
		t.Fatalf("the model got %d messages: %+v", len(m), m)
	}
	if w, h, err := mediatest.CheckQuadrants(m[0].Images[0].Data); err != nil || w != 640 || h != 480 {
		t.Fatalf("the photo arrived %d×%d: %v", w, h, err)
	}
}

// After a compaction the summary (a user message) and the kept message that follows it
// reach a strict model as one message, and the chat goes on.
func TestSummaryAndTheNextMessageReachAStrictModelAsOne(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.AlternateRoles(true)
	summariser(srv)
	s := openSession(t, harness.SessionOptions{Key: "web:strict", Store: openStore(t), Provider: openAI(t, srv), Model: "mistral-small"})
	for _, p := range []string{"I am Ann", "I live in Rome", "what is my name?"} {
		if _, err := s.Run(context.Background(), p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Compact(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(context.Background(), "and now?", nil); err != nil {
		t.Fatalf("after the compaction: %v", err)
	}
	reqs := srv.Requests()
	m := reqs[len(reqs)-1].Messages
	if i := consecutive(m); i >= 0 {
		t.Fatalf("messages %d and %d are both %s", i, i+1, m[i].Role)
	}
	if len(m) != 3 || m[0].Role != "user" || !strings.Contains(m[0].Content, "SUMMARY-1") ||
		!strings.HasSuffix(m[0].Content, "</summary>\n\nwhat is my name?") || m[2].Content != "and now?" {
		t.Fatalf("after the compaction the model got %+v", m)
	}
}

// roles lists a recorded request's messages as "role: content", tool calls and results
// named by their ids.
func roles(msgs []openaitest.Message) []string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		s := m.Role + ": " + m.Content
		for _, tc := range m.ToolCalls {
			s += " [call " + tc.ID + "]"
		}
		if m.ToolCallID != "" {
			s += " [result " + m.ToolCallID + "]"
		}
		out = append(out, s)
	}
	return out
}

// A hook's system notes reach a model whose template takes a system message only first
// (Mistral, Gemma on vLLM): the chat is answered, not refused. A note a context hook puts
// before the conversation joins the system prompt; a note injected at a turn reaches the
// model where it stands, as a marked part of that turn's user message. So the request of
// the second turn begins as the first one did, which keeps the server's prompt cache.
func TestSystemNotesReachAStrictModel(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.AlternateRoles(true)
	bus := hooks.NewBus(hooks.Options{})
	turn := 0
	bus.On(hooks.NameBeforeAgentStart, "clock", func(context.Context, hooks.Event) (any, error) {
		turn++
		return &hooks.BeforeAgentStartResult{Messages: []llm.Message{{Role: llm.RoleSystem, Content: fmt.Sprintf("The user's local time is 09:0%d.", turn)}}}, nil
	})
	bus.On(hooks.NameContext, "french", func(_ context.Context, ev hooks.Event) (any, error) {
		msgs := ev.(*hooks.Context).Messages
		return &hooks.ContextResult{Messages: append([]llm.Message{{Role: llm.RoleSystem, Content: "Answer in French."}}, msgs...)}, nil
	})
	srv.Push(openaitest.Reply{Text: "Il est 9 h 01."}, openaitest.Reply{Text: "Il est 9 h 02."})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv), System: "You are brief.", Bus: bus})
	for _, p := range []string{"What time is it?", "And now?"} {
		if _, err := s.Run(context.Background(), p, nil); err != nil {
			t.Fatalf("%q: %v", p, err)
		}
	}
	reqs := srv.Requests()
	first, second := roles(reqs[0].Messages), roles(reqs[1].Messages)
	want := []string{
		"system: You are brief.\n\nAnswer in French.",
		"user: What time is it?\n\n[system note] The user's local time is 09:01.",
		"assistant: Il est 9 h 01.",
		"user: And now?\n\n[system note] The user's local time is 09:02.",
	}
	if !slices.Equal(second, want) {
		t.Fatalf("the second turn sent\n%q\nwant\n%q", second, want)
	}
	if !slices.Equal(first, second[:len(first)]) {
		t.Fatalf("the second request does not begin as the first:\n%q\n%q", first, second)
	}
}

// A context hook that keeps only the newest messages may leave the model's answer first: a
// strict model gets a short user message before it and answers.
func TestAConversationBeginningWithAnAnswerReachesAStrictModel(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.AlternateRoles(true)
	bus := hooks.NewBus(hooks.Options{})
	bus.On(hooks.NameContext, "keep-last-2", func(_ context.Context, ev hooks.Event) (any, error) {
		msgs := ev.(*hooks.Context).Messages
		return &hooks.ContextResult{Messages: msgs[max(len(msgs)-2, 0):]}, nil
	})
	srv.Push(openaitest.Reply{Text: "Hello, Ann."}, openaitest.Reply{Text: "You are Ann."})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv), Bus: bus})
	for _, p := range []string{"I am Ann", "Who am I?"} {
		if _, err := s.Run(context.Background(), p, nil); err != nil {
			t.Fatalf("%q: %v", p, err)
		}
	}
	reqs := srv.Requests()
	want := []string{"user: (earlier conversation omitted)", "assistant: Hello, Ann.", "user: Who am I?"}
	if got := roles(reqs[len(reqs)-1].Messages); !slices.Equal(got, want) {
		t.Fatalf("the second turn sent %q; want %q", got, want)
	}
}

// Two answers side by side (a context hook left out the user's message between them) reach
// a strict model as one; when the second made a tool call, the one message carries both
// texts and the call, still followed by the call's result.
func TestAnswersSideBySideReachAStrictModelAsOne(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.AlternateRoles(true)
	tools, err := harness.BuiltinTools([]string{"current_time"})
	if err != nil {
		t.Fatal(err)
	}
	bus := hooks.NewBus(hooks.Options{})
	// The model sees a password only while it answers the message that holds it.
	bus.On(hooks.NameContext, "forget-passwords", func(_ context.Context, ev hooks.Event) (any, error) {
		msgs := ev.(*hooks.Context).Messages
		last := len(msgs) - 1
		for last >= 0 && msgs[last].Role != llm.RoleUser {
			last--
		}
		var out []llm.Message
		for i, m := range msgs {
			if m.Role == llm.RoleUser && i != last && strings.Contains(m.Content, "password") {
				continue
			}
			out = append(out, m)
		}
		return &hooks.ContextResult{Messages: out}, nil
	})
	srv.Push(openaitest.Reply{Text: "Hi, Ann."},
		openaitest.Reply{Text: "Noted.", ToolCalls: []openaitest.ToolCall{{ID: "c1", Name: "current_time", Arguments: `{}`}}},
		openaitest.Reply{Text: "It is noon."},
		openaitest.Reply{Text: "You are welcome."})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv), Tools: tools, Bus: bus})
	for _, p := range []string{"Hello", "My wifi password is hunter2. What time is it?", "Thanks!"} {
		if _, err := s.Run(context.Background(), p, nil); err != nil {
			t.Fatalf("%q: %v", p, err)
		}
	}
	reqs := srv.Requests()
	m := reqs[len(reqs)-1].Messages
	want := []string{"user: Hello", "assistant: Hi, Ann.\n\nNoted. [call c1]", "tool: " + m[2].Content + " [result c1]", "assistant: It is noon.", "user: Thanks!"}
	if got := roles(m); !slices.Equal(got, want) {
		t.Fatalf("the third turn sent %q; want %q", got, want)
	}
	if bad := validToolTraffic(m); bad != "" {
		t.Fatal(bad)
	}
}
