package web_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"gateway/channels"
	"gateway/channels/web"
)

// transcript renders history entries as "role:text" lines for comparison.
func transcript(h []historyEntry) string {
	var lines []string
	for _, e := range h {
		line := e.Role + ":" + e.Text
		if e.Voice {
			line += "(voice)"
		}
		if e.Error {
			line += "(error)"
		}
		if len(e.Parts) > 0 {
			line += fmt.Sprintf("(+%d parts)", len(e.Parts))
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// answer sends a whole answer to msg's chat as the gateway does.
func answer(t *testing.T, ch *web.Channel, chat, replyTo string, frames ...channels.Frame) {
	t.Helper()
	st, err := ch.Open(context.Background(), channels.Target{Channel: "web", ChatID: chat, ReplyToID: replyTo})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		if err := st.Send(context.Background(), f); err != nil {
			t.Fatal(err)
		}
	}
}

// A page that reloads (a new socket on the same chat) is greeted with the conversation so
// far: what the user sent and the finished answers, in order; /new starts it over.
func TestHistoryGreetsAReloadedPage(t *testing.T) {
	ch, base, sink := started(t, web.Config{Enabled: true})
	tb, err := openTab(t, base, "h1")
	if err != nil {
		t.Fatal(err)
	}
	tb.write(t, clientMsg{Type: "message", ID: "m1", ChatID: "h1", Text: "hello there"})
	sink.Next(t)
	answer(t, ch, "h1", "m1",
		channels.Frame{Type: channels.FrameStart},
		channels.Frame{Type: channels.FrameDelta, Text: "Hi! "},
		channels.Frame{Type: channels.FrameDelta, Text: "How can I help?"},
		channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartAudio, MIME: "audio/ogg", Data: []byte("OggS"), Voice: true}}},
		channels.Frame{Type: channels.FrameDone, Text: "Hi! How can I help?"})
	tb.write(t, clientMsg{Type: "message", ID: "m2", ChatID: "h1", Audio: &clientAudio{MIME: "audio/ogg", Data: base64.StdEncoding.EncodeToString([]byte("OggS voice"))}})
	sink.Next(t)
	answer(t, ch, "h1", "m2", channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameError, Text: "I could not reach the model (network error). Please try again later."})
	// A stopped answer keeps what was said so far (done carries no text then).
	tb.write(t, clientMsg{Type: "message", ID: "m3", ChatID: "h1", Text: "tell me a story"})
	sink.Next(t)
	answer(t, ch, "h1", "m3", channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDelta, Text: "Once upon"}, channels.Frame{Type: channels.FrameDone})
	// A message the gateway did not take is not part of the conversation.
	sink.refuse = []error{channels.ErrNotAccepted}
	tb.write(t, clientMsg{Type: "message", ID: "m4", ChatID: "h1", Text: "refused"})
	tb.waitFor(t, func() bool { return tb.replies("m4") > 0 }, "a reply to m4")
	if n := tb.count("ack"); n != 3 {
		t.Fatalf("%d acks; want m1-m3 taken and m4 refused", n)
	}

	_, _, hello, err := dialHello(t, base, "h1", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "user:hello there\nassistant:Hi! How can I help?(+1 parts)\nuser:(voice)\n" +
		"assistant:I could not reach the model (network error). Please try again later.(error)\nuser:tell me a story\nassistant:Once upon"
	if got := transcript(hello.History); got != want {
		t.Errorf("history after a reload:\n%s\nwant:\n%s", got, want)
	}
	if h := hello.History; len(h) > 1 && (h[0].ID != "m1" || h[1].ReplyTo != "m1" || h[1].Parts[0].URL == "") {
		t.Errorf("history entries %+v; want ids and the answer's media URL", h[:2])
	}
	if _, _, other, err := dialHello(t, base, "h2", nil); err != nil || len(other.History) != 0 {
		t.Errorf("another chat's page got %+v (%v); want no history", other.History, err)
	}

	// /new starts the transcript over.
	tb.write(t, clientMsg{Type: "message", ID: "m5", ChatID: "h1", Text: "/new"})
	sink.Next(t)
	answer(t, ch, "h1", "m5", channels.Frame{Type: channels.FrameDone, Text: "Started a new conversation."})
	_, _, hello, err = dialHello(t, base, "h1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := transcript(hello.History), "user:/new\nassistant:Started a new conversation."; got != want {
		t.Errorf("history after /new:\n%s\nwant:\n%s", got, want)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	ch, base, _ := started(t, web.Config{Enabled: true})
	for i := range 150 {
		answer(t, ch, "long", fmt.Sprint("q", i), channels.Frame{Type: channels.FrameDone, Text: fmt.Sprint("answer ", i)})
	}
	big := strings.Repeat("x", 100<<10)
	answer(t, ch, "long", "big", channels.Frame{Type: channels.FrameDone, Text: big})
	_, _, hello, err := dialHello(t, base, "long", nil)
	if err != nil {
		t.Fatal(err)
	}
	h := hello.History
	if len(h) == 0 || len(h) > 100 {
		t.Fatalf("history holds %d entries; want at most 100", len(h))
	}
	if last := h[len(h)-1].Text; len(last) >= len(big) || !strings.HasPrefix(last, "xxx") {
		t.Errorf("a 100 KB answer is kept as %d bytes; want it clipped", len(last))
	}
	if h[len(h)-2].Text != "answer 149" {
		t.Errorf("history ends with %q before the big one; want the newest answers kept", h[len(h)-2].Text)
	}
	// Many chats: the least recently used are forgotten, the newest kept.
	for i := range 200 {
		answer(t, ch, fmt.Sprint("c", i), "q", channels.Frame{Type: channels.FrameDone, Text: "hi"})
	}
	if _, _, f, _ := dialHello(t, base, "c199", nil); len(f.History) != 1 {
		t.Errorf("newest chat's history %+v; want its answer", f.History)
	}
	if _, _, f, _ := dialHello(t, base, "c0", nil); len(f.History) != 0 {
		t.Errorf("oldest of 200 chats still has history %+v; want the chats bounded", f.History)
	}
}

// An answer that /new cut short (its done, without text, is sent after the /new arrived)
// belongs to the conversation that /new ended: a reloaded page shows only the new one, as
// the live page did.
func TestHistoryNewDropsTheAnswerItCut(t *testing.T) {
	ch, base, sink := started(t, web.Config{Enabled: true})
	tb, err := openTab(t, base, "cut")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tb.write(t, clientMsg{Type: "message", ID: "m1", ChatID: "cut", Text: "please be slow"})
	sink.Next(t)
	slow, err := ch.Open(ctx, channels.Target{Channel: "web", ChatID: "cut", ReplyToID: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []channels.Frame{{Type: channels.FrameStart}, {Type: channels.FrameDelta, Text: "model=fake a long"}} {
		if err := slow.Send(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	tb.write(t, clientMsg{Type: "message", ID: "m2", ChatID: "cut", Text: "/new"})
	sink.Next(t)
	// The stopped turn ends after the /new was taken, as the gateway's /new stops it.
	if err := slow.Send(ctx, channels.Frame{Type: channels.FrameDone}); err != nil {
		t.Fatal(err)
	}
	answer(t, ch, "cut", "m2", channels.Frame{Type: channels.FrameDone, Text: "Started a new conversation."})
	tb.write(t, clientMsg{Type: "message", ID: "m3", ChatID: "cut", Text: "after new"})
	sink.Next(t)
	answer(t, ch, "cut", "m3", channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDone, Text: "you said: after new"})

	_, _, hello, err := dialHello(t, base, "cut", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "user:/new\nassistant:Started a new conversation.\nuser:after new\nassistant:you said: after new"
	if got := transcript(hello.History); got != want {
		t.Errorf("history after /new cut an answer:\n%s\nwant:\n%s", got, want)
	}
}

// A burst of questions queued behind a slow model: the answers come long after the
// questions sent behind them. A reloaded page shows the newest exchanges, each question
// followed by its own answer, as the page shows them live, never an answer without its
// question.
func TestHistoryKeepsQuestionsWithTheirAnswers(t *testing.T) {
	ch, base, sink := started(t, web.Config{Enabled: true})
	tb, err := openTab(t, base, "burst")
	if err != nil {
		t.Fatal(err)
	}
	const n = 120
	answered := 0
	reply := func() {
		answered++
		id := fmt.Sprint("e", answered)
		answer(t, ch, "burst", id, channels.Frame{Type: channels.FrameStart},
			channels.Frame{Type: channels.FrameDone, Text: "you said: " + id})
	}
	for i := 1; i <= n; i++ {
		id := fmt.Sprint("e", i)
		tb.write(t, clientMsg{Type: "message", ID: id, ChatID: "burst", Text: id})
		sink.Next(t)
		if i%3 == 0 { // the model answers one while three more arrive
			reply()
		}
	}
	for answered < n {
		reply()
	}

	_, _, hello, err := dialHello(t, base, "burst", nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := n - 49; i <= n; i++ {
		want = append(want, fmt.Sprintf("user:e%d", i), fmt.Sprintf("assistant:you said: e%d", i))
	}
	if got := transcript(hello.History); got != strings.Join(want, "\n") {
		t.Errorf("history after a burst of %d (%d entries):\n%s\nwant the last 50 exchanges:\n%s", n, len(hello.History), got, strings.Join(want, "\n"))
	}
}
