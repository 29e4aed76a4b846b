package harness_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"gateway/harness"
	"gateway/harness/anthropictest"
	"gateway/harness/openaitest"
	"gateway/hooks"
	"gateway/internal/llm"
	"gateway/internal/media/mediatest"
	"gateway/internal/secret"
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
	clockNotes(bus)
	frenchFirst(bus)
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

func claude(t *testing.T, srv *anthropictest.Server) harness.Provider {
	t.Helper()
	p, err := harness.NewProvider(harness.Config{Provider: "anthropic", Model: "claude-test", BaseURL: srv.URL(), APIKey: secret.Secret(testKey)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// turns lists a recorded Anthropic request's messages as "role: block | block", tool_use
// and tool_result blocks named by their ids.
func turns(msgs []anthropictest.Message) []string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		var blocks []string
		for _, b := range m.Blocks {
			switch b.Type {
			case "tool_use":
				blocks = append(blocks, "[use "+b.ID+"]")
			case "tool_result":
				blocks = append(blocks, "[result "+b.ToolUseID+"]")
			default:
				blocks = append(blocks, b.Text)
			}
		}
		out = append(out, m.Role+": "+strings.Join(blocks, " | "))
	}
	return out
}

// clockNotes injects a note of the time at every turn (the first at 09:01), the way a hook
// tells the model what the user's clock says.
func clockNotes(bus *hooks.Bus) {
	turn := 0
	bus.On(hooks.NameBeforeAgentStart, "clock", func(context.Context, hooks.Event) (any, error) {
		turn++
		return &hooks.BeforeAgentStartResult{Messages: []llm.Message{{Role: llm.RoleSystem, Content: fmt.Sprintf("The user's local time is 09:0%d.", turn)}}}, nil
	})
}

// frenchFirst adds a context hook that puts a system note before the whole conversation.
func frenchFirst(bus *hooks.Bus) {
	bus.On(hooks.NameContext, "french", func(_ context.Context, ev hooks.Event) (any, error) {
		msgs := ev.(*hooks.Context).Messages
		return &hooks.ContextResult{Messages: append([]llm.Message{{Role: llm.RoleSystem, Content: "Answer in French."}}, msgs...)}, nil
	})
}

// A hook's note injected at a turn reaches Claude where it stands, in that turn's user
// message and marked as a note, as it reaches an OpenAI-compatible model; a note a context
// hook puts before the conversation still joins the system prompt. Before, every note went
// to the system prompt, away from the turn it was about.
func TestSystemNotesReachClaudeWhereTheyStand(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	bus := hooks.NewBus(hooks.Options{})
	clockNotes(bus)
	frenchFirst(bus)
	srv.Push(anthropictest.Reply{Text: "Il est 9 h 01."}, anthropictest.Reply{Text: "Il est 9 h 02."})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: claude(t, srv), System: "You are brief.", Bus: bus})
	for _, p := range []string{"What time is it?", "And now?"} {
		if _, err := s.Run(context.Background(), p, nil); err != nil {
			t.Fatalf("%q: %v", p, err)
		}
	}
	reqs := srv.Requests()
	last := reqs[len(reqs)-1]
	want := []string{
		"user: What time is it? | [system note] The user's local time is 09:01.",
		"assistant: Il est 9 h 01.",
		"user: And now? | [system note] The user's local time is 09:02.",
	}
	if got := turns(last.Messages); !slices.Equal(got, want) || last.System != "You are brief.Answer in French." {
		t.Fatalf("the second turn sent system %q and\n%q\nwant\n%q", last.System, got, want)
	}
}

// A note that comes later in a chat (here at its second turn) leaves the beginning of
// Claude's request as it was: the tools, the system prompt and the first turn's messages
// are sent as in the first request, and the prompt cache holds them. Before, the note
// joined the system prompt, and every later request began otherwise.
func TestALaterNoteKeepsTheBeginningOfClaudesRequest(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	srv.SetCacheMin(1) // a conversation this short is cached too
	tools, err := harness.BuiltinTools([]string{"current_time"})
	if err != nil {
		t.Fatal(err)
	}
	bus := hooks.NewBus(hooks.Options{})
	turn := 0
	bus.On(hooks.NameBeforeAgentStart, "reminder", func(context.Context, hooks.Event) (any, error) {
		if turn++; turn < 2 {
			return nil, nil
		}
		return &hooks.BeforeAgentStartResult{Messages: []llm.Message{{Role: llm.RoleSystem, Content: "The user has a meeting at ten."}}}, nil
	})
	srv.Push(anthropictest.Reply{Text: "Hello, Ann."}, anthropictest.Reply{Text: "You are Ann."})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: claude(t, srv), System: "You are brief.", Tools: tools, Bus: bus})
	for _, p := range []string{"I am Ann", "Who am I?"} {
		if _, err := s.Run(context.Background(), p, nil); err != nil {
			t.Fatalf("%q: %v", p, err)
		}
	}
	reqs := srv.Requests()
	if first, second := reqs[0].Cache, reqs[1].Cache; first.Written == 0 || second.Read != first.Written {
		t.Fatalf("the second request read %d tokens from the prompt cache; want all %d the first wrote", second.Read, first.Written)
	}
	want := []string{"user: I am Ann", "assistant: Hello, Ann.", "user: Who am I? | [system note] The user has a meeting at ten."}
	if got := turns(reqs[1].Messages); !slices.Equal(got, want) {
		t.Fatalf("the second turn sent %q; want %q", got, want)
	}
}

// Notes beside tool traffic keep it as the API wants it: the turn's note stays with the
// user's words, a note after a tool's result goes in the same user message as the result,
// after it, and each tool_use is answered first thing in the next message (the fake
// refuses the request otherwise). The chat is answered at every step.
func TestNotesBesideToolTrafficKeepClaudesPairs(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	tools, err := harness.BuiltinTools([]string{"current_time"})
	if err != nil {
		t.Fatal(err)
	}
	bus := hooks.NewBus(hooks.Options{})
	clockNotes(bus)
	bus.On(hooks.NameContext, "cite-tools", func(_ context.Context, ev hooks.Event) (any, error) {
		msgs := ev.(*hooks.Context).Messages
		if msgs[len(msgs)-1].Role != llm.RoleTool {
			return nil, nil
		}
		return &hooks.ContextResult{Messages: append(msgs[:len(msgs):len(msgs)], llm.Message{Role: llm.RoleSystem, Content: "Say which tool you used."})}, nil
	})
	srv.Push(anthropictest.Reply{Text: "Let me look.", ToolUses: []anthropictest.ToolUse{{ID: "toolu_1", Name: "current_time", Input: `{}`}}},
		anthropictest.Reply{Text: "It is noon, says current_time."}, anthropictest.Reply{Text: "You are welcome."})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: claude(t, srv), Tools: tools, Bus: bus})
	for _, p := range []string{"What time is it?", "Thanks!"} {
		if _, err := s.Run(context.Background(), p, nil); err != nil {
			t.Fatalf("%q: %v", p, err)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests; want 3", len(reqs))
	}
	want := []string{
		"user: What time is it? | [system note] The user's local time is 09:01.",
		"assistant: Let me look. | [use toolu_1]",
		"user: [result toolu_1] | [system note] Say which tool you used.",
	}
	if got := turns(reqs[1].Messages); !slices.Equal(got, want) {
		t.Fatalf("the tool step sent\n%q\nwant\n%q", got, want)
	}
	want = append(want[:2:2], "user: [result toolu_1]", "assistant: It is noon, says current_time.",
		"user: Thanks! | [system note] The user's local time is 09:02.")
	if got := turns(reqs[2].Messages); !slices.Equal(got, want) {
		t.Fatalf("the next turn sent\n%q\nwant\n%q", got, want)
	}
}

// Claude's prompt cache holds what a chat's requests begin with: a tool step's request reads
// the tools, the system prompt and the conversation the step before sent from the cache,
// and the tokens the cache held still count in the chat's context (what /status shows and
// compaction weighs) and in its usage. The API's input_tokens leaves them out.
func TestClaudeReadsAToolTurnFromThePromptCache(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	tools, err := harness.BuiltinTools([]string{"current_time"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Push(anthropictest.Reply{ToolUses: []anthropictest.ToolUse{{ID: "toolu_1", Name: "current_time", Input: `{}`}}},
		anthropictest.Reply{Text: "It is late."})
	system := "You answer questions about time. " + strings.Repeat("Be precise and brief. ", 300) // past the cache's minimum
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: claude(t, srv), System: system, Tools: tools})
	if _, err := s.Run(context.Background(), "What time is it?", nil); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model calls = %d; want the tool step and the answer", len(reqs))
	}
	if first, second := reqs[0].Cache, reqs[1].Cache; first.Written == 0 || second.Read != first.Written {
		t.Fatalf("the prompt cache: the step wrote %d tokens, the answer's request read %d; want it to read them all", first.Written, second.Read)
	}
	st := s.Stats()
	if sent := anthropictest.Tokens(reqs[0].Body) + anthropictest.Tokens(reqs[1].Body); st.Usage.InputTokens != sent {
		t.Errorf("input tokens counted = %d; want all %d sent, the cached ones too", st.Usage.InputTokens, sent)
	}
	if last := anthropictest.Tokens(reqs[1].Body); st.ContextTokens < last {
		t.Errorf("the chat's context is counted as %d tokens; its last request alone was %d", st.ContextTokens, last)
	}
}
