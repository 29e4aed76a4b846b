package harness_test

import (
	"context"
	"strings"
	"testing"

	"gateway/harness"
	"gateway/harness/openaitest"
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
