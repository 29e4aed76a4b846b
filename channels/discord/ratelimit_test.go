package discord

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/discord/discordtest"
	"gateway/internal/fakeserver"
	"gateway/internal/secret"
)

// startFake starts a Channel on srv; typing refreshes every typingEvery.
func startFake(t *testing.T, srv *discordtest.Server, typingEvery time.Duration) (*Channel, context.Context) {
	t.Helper()
	c, err := New(Config{Token: secret.Secret(srv.Bot().Token), APIURL: srv.URL}, Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c.typingEvery = typingEvery
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if err := c.Start(ctx, channeltest.NewSink()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c, ctx
}

// chatCalls lists the REST calls that reached chat (messages, edits, files, typing).
func chatCalls(srv *discordtest.Server, chat string) []discordtest.Call {
	var out []discordtest.Call
	for _, c := range srv.Calls() {
		if strings.Contains(c.Path, "/channels/"+chat+"/") {
			out = append(out, c)
		}
	}
	return out
}

// limitedAt is when the first 429 to chat arrived at the fake.
func limitedAt(t *testing.T, srv *discordtest.Server, chat string) time.Time {
	t.Helper()
	for _, c := range chatCalls(srv, chat) {
		if c.Status == http.StatusTooManyRequests {
			return c.Time
		}
	}
	t.Fatalf("no 429 reached chat %s: %+v", chat, chatCalls(srv, chat))
	return time.Time{}
}

// noneDuring fails for every call to chat that arrived after the 429 at limited and before
// its retry_after passed.
func noneDuring(t *testing.T, srv *discordtest.Server, chat string, limited time.Time, wait time.Duration) {
	t.Helper()
	for _, c := range chatCalls(srv, chat) {
		if c.Time.After(limited) && c.Time.Before(limited.Add(wait)) {
			t.Errorf("%s %s reached the chat %v after a 429 asking for %v", c.Method, c.Path, c.Time.Sub(limited), wait)
		}
	}
}

// A 429 on the first post of an answer (a streaming preview) holds every later send to
// the chat: previews and typing skip their turn, the file part and the text wait, and the
// text arrives once, after the wait.
func TestRateLimitHoldsEveryLaterSendToTheChat(t *testing.T) {
	t.Parallel()
	const chat, wait = "796", 2 * time.Second
	srv := discordtest.New(t)
	c, ctx := startFake(t, srv, 250*time.Millisecond)
	srv.AddDM(chat)
	st, err := c.Open(ctx, channels.Target{ChatID: chat, ChatType: channels.ChatDM})
	if err != nil {
		t.Fatal(err)
	}
	send := func(f channels.Frame) {
		t.Helper()
		if err := st.Send(ctx, f); err != nil {
			t.Fatalf("%s: %v", f.Type, err)
		}
	}
	send(channels.Frame{Type: channels.FrameStart})
	srv.FailNext(1, fakeserver.Failure{RetryAfter: wait})
	// Deltas skip a preview the hold would delay rather than wait for it.
	delta := func(text string) {
		t.Helper()
		begin := time.Now()
		send(channels.Frame{Type: channels.FrameDelta, Text: text})
		if d := time.Since(begin); d > 500*time.Millisecond {
			t.Errorf("a streaming delta took %v: it queued behind the hold", d)
		}
	}
	delta("The answer")
	limited := limitedAt(t, srv, chat)
	// Deltas while the hold lasts: a preview falls due every second, typing every 250ms.
	for time.Since(limited) < 1500*time.Millisecond {
		delta(" word")
		time.Sleep(100 * time.Millisecond)
	}
	send(channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartFile, Name: "notes.txt", MIME: "text/plain", Data: []byte("notes")}}})
	send(channels.Frame{Type: channels.FrameDone})

	noneDuring(t, srv, chat, limited, wait)
	posted := srv.Posted(chat)
	if len(posted) != 2 || !strings.HasPrefix(posted[0].Content, "The answer word") || len(posted[1].Files) != 1 {
		t.Fatalf("posted %+v; want the text once, then the file", posted)
	}
	if at := posted[0].Time.Sub(limited); at < wait {
		t.Errorf("the text arrived %v after the 429; retry_after was %v", at, wait)
	}
	attempts := 0
	for _, c := range chatCalls(srv, chat) {
		if c.Method == http.MethodPost && strings.Contains(string(c.Payload), "The answer") {
			attempts++
		}
	}
	if attempts < 2 {
		t.Errorf("the text went out in %d attempts; want the 429 and a later one", attempts)
	}
}

// A 429 on typing holds the answer's text too.
func TestTypingRateLimitHoldsTheAnswer(t *testing.T) {
	t.Parallel()
	const chat, wait = "797", 1500 * time.Millisecond
	srv := discordtest.New(t)
	c, ctx := startFake(t, srv, typingEvery)
	srv.AddDM(chat)
	st, err := c.Open(ctx, channels.Target{ChatID: chat, ChatType: channels.ChatDM})
	if err != nil {
		t.Fatal(err)
	}
	srv.FailNext(1, fakeserver.Failure{Method: "typing", RetryAfter: wait})
	if err := st.Send(ctx, channels.Frame{Type: channels.FrameStart}); err != nil {
		t.Fatal(err)
	}
	if !c.send.Held(chat) {
		t.Fatalf("a 429 on typing did not hold the chat")
	}
	if err := st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "after the hold"}); err != nil {
		t.Fatal(err)
	}
	limited := limitedAt(t, srv, chat)
	noneDuring(t, srv, chat, limited, wait)
	posted := srv.Posted(chat)
	if len(posted) != 1 || posted[0].Content != "after the hold" || posted[0].Time.Sub(limited) < wait {
		t.Fatalf("posted %+v; want the text once, %v after the 429 at %v", posted, wait, limited)
	}
}
