package slack

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/slack/slacktest"
	"gateway/internal/fakeserver"
)

// toChat reports whether a call the fake received puts something in chat (or shows
// typing there). The upload flow's first two steps name no channel: in these tests only
// the answer under test uploads, so they count as the chat's.
func toChat(c slacktest.Call, chat string) bool {
	switch c.Method {
	case "files.getUploadURLExternal", "files.upload":
		return true
	case "chat.postMessage", "chat.postEphemeral", "chat.update", "chat.delete", "reactions.add", "reactions.remove":
		return c.Params.Get("channel") == chat
	case "assistant.threads.setStatus", "files.completeUploadExternal":
		return c.Params.Get("channel_id") == chat
	}
	return false
}

// quickly runs one frame that may only skip its turn while the chat is held: it must not
// wait the hold out.
func quickly(t *testing.T, st channels.Stream, f channels.Frame) {
	t.Helper()
	began := time.Now()
	if err := st.Send(context.Background(), f); err != nil {
		t.Fatalf("Send %s while the chat is held: %v", f.Type, err)
	}
	if d := time.Since(began); d > 500*time.Millisecond {
		t.Fatalf("Send %s took %v while the chat was held; an optional send skips its turn", f.Type, d)
	}
}

// A 429 on the first send of an answer holds every later send to that chat — the other
// answer's typing and text, this answer's edits, tool status, voice note and final text —
// until Slack's Retry-After has passed; then the answer arrives once, whole.
func TestRateLimitHoldsEverySendToTheChat(t *testing.T) {
	for _, first := range []string{"preview", "final"} {
		t.Run(first, func(t *testing.T) {
			s := slacktest.New(t)
			st := start(t, s, nil)
			const chat, wait = "C9", 2 * time.Second
			rootA := s.ChannelMessage(chat, user, "question A", true)
			mA := st.sink.Next(t)
			rootB := s.ChannelMessage(chat, user, "question B", true)
			mB := st.sink.Next(t)
			ctx := context.Background()
			a, err := st.ch.Open(ctx, channels.TargetOf(mA))
			if err != nil {
				t.Fatal(err)
			}
			b, err := st.ch.Open(ctx, channels.TargetOf(mB))
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Send(ctx, channels.Frame{Type: channels.FrameStart}); err != nil {
				t.Fatal(err)
			}
			const textA = "Answer A, part one; part two."
			voice := channels.Part{Type: channels.PartAudio, Voice: true, MIME: "audio/ogg", Data: randomBytes(t, 1500)}
			s.FailNext(1, fakeserver.Failure{Method: "chat.postMessage", RetryAfter: wait})

			var wg sync.WaitGroup
			errs := make(chan error, 8)
			if first == "preview" {
				// The first streaming edit meets the 429; the rest of A skips or waits.
				quickly(t, a, channels.Frame{Type: channels.FrameDelta, Text: "Answer A, part one;"})
			} else {
				// The final text meets the 429: its Sender retries after Retry-After.
				wg.Go(func() {
					errs <- a.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: textA})
				})
			}
			eventually(t, "the 429", func() bool {
				c := s.Calls("chat.postMessage")
				return len(c) > 0 && c[0].Status == http.StatusTooManyRequests
			})
			limited := s.Calls("chat.postMessage")[0]

			// While the chat is held: typing and streaming skip their turn at once.
			quickly(t, b, channels.Frame{Type: channels.FrameStart})
			if first == "preview" {
				quickly(t, a, channels.Frame{Type: channels.FrameDelta, Text: " part two."})
				quickly(t, a, channels.Frame{Type: channels.FrameTool, Tool: &channels.ToolInfo{Name: "search", Phase: "start"}})
				wg.Go(func() {
					errs <- a.Send(ctx, channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{voice}})
					errs <- a.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: textA})
				})
			}
			// What must be seen waits the hold out, from every path.
			wg.Go(func() { errs <- b.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "Answer B."}) })
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("a send failed: %v", err)
				}
			}

			for _, c := range s.Calls("") {
				if c.Time.After(limited.Time) && c.Time.Before(limited.Time.Add(wait)) && toChat(c, chat) {
					t.Errorf("%s reached %s %v after the 429; Retry-After was %v", c.Method, chat, c.Time.Sub(limited.Time), wait)
				}
			}
			var inA, inB []slacktest.Posted
			for _, p := range s.Posted(chat) {
				switch p.ThreadTS {
				case rootA:
					inA = append(inA, p)
				case rootB:
					inB = append(inB, p)
				}
			}
			if len(inB) != 1 || inB[0].Text != "Answer B." {
				t.Errorf("thread B shows %+v; want the answer once", inB)
			}
			var texts []string
			files := 0
			for _, p := range inA {
				if p.Text != "" {
					texts = append(texts, p.Text)
				}
				files += len(p.Files)
			}
			if len(texts) != 1 || !strings.Contains(texts[0], "part one; part two.") {
				t.Errorf("thread A shows %q; want the answer once, whole", texts)
			}
			attempts := 0
			for _, c := range s.Calls("chat.postMessage") {
				if c.Params.Get("thread_ts") == rootA {
					attempts++
				}
			}
			if attempts < 2 {
				t.Errorf("answer A was posted in %d attempt(s); want the 429 and a later one", attempts)
			}
			if want := map[string]int{"preview": 1, "final": 0}[first]; files != want {
				t.Errorf("thread A has %d file(s); want %d", files, want)
			}
		})
	}
}
