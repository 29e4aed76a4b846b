package telegram_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/internal/fakeserver"
)

// A streaming preview that finds no free send slot for the bot must not use up the chat's
// slot: the final answer would then wait for the chat's next one (here a minute).
func TestSkippedPreviewLeavesTheChatsSendSlot(t *testing.T) {
	f := newFixture(t)
	f.chats(1001)
	opts := f.options()
	opts.Pacing = telegram.Pacing{GlobalPerSecond: 1, PerChatInterval: time.Minute, GroupInterval: -1}
	ch := f.start(f.config(), opts, channeltest.NewSink())
	target := channels.Target{Channel: telegram.Name, ChatID: "1001", ChatType: channels.ChatDM}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := ch.Open(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(ctx, channels.Frame{Type: channels.FrameStart}); err != nil {
		t.Fatal(err)
	}
	// The typing action takes the bot's only slot of this second, so the preview is skipped.
	eventually(t, "the typing action", func() bool { return f.srv.Typing(1001) == 1 })
	for _, fr := range []channels.Frame{{Type: channels.FrameDelta, Text: "Hel"}, done("Hello")} {
		if err := st.Send(ctx, fr); err != nil {
			t.Fatalf("Send %s: %v", fr.Type, err)
		}
	}
	if m := f.srv.Messages(1001); len(m) != 1 || m[0].Text != "Hello" {
		t.Fatalf("chat shows %+v; want the answer", m)
	}
}

// The typing indicator goes out while the model works: the start of an answer does not
// wait for Telegram to confirm it, yet even an instant answer still shows it first.
func TestTypingDoesNotHoldTheAnswerBack(t *testing.T) {
	f := newFixture(t)
	f.chats(1001)
	f.srv.Slow("sendChatAction", 2*time.Second)
	ch := f.start(f.config(), f.options(), channeltest.NewSink())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := ch.Open(ctx, channels.Target{Channel: telegram.Name, ChatID: "1001", ChatType: channels.ChatDM})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(ctx, channels.Frame{Type: channels.FrameStart}); err != nil {
		t.Fatal(err)
	}
	if n := f.srv.Typing(1001); n != 0 {
		t.Fatalf("the start of the answer waited for Telegram to take the typing action (%d seen)", n)
	}
	if err := st.Send(ctx, done("Hi")); err != nil {
		t.Fatal(err)
	}
	typing, sent := f.srv.Calls("sendChatAction"), f.srv.Calls("sendMessage")
	if len(typing) != 1 || len(sent) != 1 || !typing[0].Time.Before(sent[0].Time) || f.srv.Typing(1001) != 1 {
		t.Fatalf("typing %+v, answer %+v; want the typing action taken before the answer", typing, sent)
	}
}

// After a 429 with retry_after on the first message of a streamed answer, nothing goes to
// that chat until the wait has passed, whichever path sends next: the final text, a voice
// note of another answer, the typing indicator. Other chats are not held. The answer is
// delivered once, on a second attempt.
func TestRetryAfterHoldsEverySendToTheChat(t *testing.T) {
	f := newFixture(t)
	f.chats(1001, 2002)
	opts := f.options()
	opts.TypingInterval = 100 * time.Millisecond // typing keeps asking during the hold
	ch := f.start(f.config(), opts, channeltest.NewSink())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	target := channels.Target{Channel: telegram.Name, ChatID: "1001", ChatType: channels.ChatDM}
	a, err := ch.Open(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, channels.Frame{Type: channels.FrameStart}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first typing action", func() bool { return f.srv.Typing(1001) > 0 })
	const retryAfter = 3 * time.Second
	f.srv.FailNext(1, fakeserver.Failure{RetryAfter: retryAfter})
	if err := a.Send(ctx, channels.Frame{Type: channels.FrameDelta, Text: "Hello"}); err != nil {
		t.Fatal(err)
	}
	var limited telegramtest.Call
	eventually(t, "the 429", func() bool {
		for _, c := range f.srv.Calls("sendMessage") {
			if c.Status == 429 {
				limited = c
				return true
			}
		}
		return false
	})
	// The preview runs on a goroutine of its own: its 429 is known (the chat held) within
	// microseconds of the answer, well before the fake's record of it is seen here.
	knew := time.Now()
	// Another chat is not held.
	answer(t, ch, channels.Target{Channel: telegram.Name, ChatID: "2002", ChatType: channels.ChatDM}, done("not held"))
	// Another answer to the held chat: its voice note waits too.
	b, err := ch.Open(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	voice := channels.Part{Type: channels.PartAudio, MIME: "audio/ogg", Voice: true, Data: []byte("OggS\x00\x02 OpusHead fake voice")}
	if err := b.Send(ctx, channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{voice}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctx, done("")); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, done("Hello world")); err != nil {
		t.Fatal(err)
	}

	if other := f.srv.Messages(2002); len(other) != 1 || !other[0].Time.Before(limited.Time.Add(retryAfter)) {
		t.Errorf("another chat got %+v; want its answer during the first chat's hold", other)
	}
	// Calls to chat 1001 that the bot started after it knew of the 429 and before
	// retry_after passed break the hold.
	var sends int
	for _, c := range f.srv.Calls("") {
		if c.Params["chat_id"] != "1001" {
			continue
		}
		if c.Method == "sendMessage" {
			sends++
		}
		if c.Time.After(knew) && c.Time.Before(limited.Time.Add(retryAfter)) {
			t.Errorf("%s went to the chat %v after a 429 with retry_after %v", c.Method, c.Time.Sub(limited.Time).Round(time.Millisecond), retryAfter)
		}
	}
	if sends < 2 {
		t.Errorf("sendMessage was called %d times; want the refused one and a later attempt", sends)
	}
	msgs := f.srv.Messages(1001)
	var texts []string
	for _, m := range msgs {
		if m.Kind == "text" {
			texts = append(texts, m.Text)
		}
	}
	if len(texts) != 1 || texts[0] != "Hello world" || len(msgs) != 2 {
		t.Fatalf("the chat shows %+v; want the answer once and the voice note", msgs)
	}
}

// A 429 with retry_after on the first message of an answer holds the chat: the message is
// sent again once the wait has passed, and nothing reaches the chat meanwhile — not the
// rest of the answer (split in two messages), not a file or the typing indicator of
// another answer to the chat, which keeps asking and skips its turns. Another chat is not
// held. The answer arrives once, after more than one attempt.
func TestRateLimitedAnswerWaitsOutTheHold(t *testing.T) {
	f := newFixture(t)
	f.chats(1001, 2002)
	opts := f.options()
	opts.TypingInterval = 100 * time.Millisecond
	ch := f.start(f.config(), opts, channeltest.NewSink())
	const retryAfter = 2 * time.Second
	f.srv.FailNext(1, fakeserver.Failure{Method: "sendMessage", Chat: "1001", RetryAfter: retryAfter})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	target := channels.Target{Channel: telegram.Name, ChatID: "1001", ChatType: channels.ChatDM}

	a, err := ch.Open(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, channels.Frame{Type: channels.FrameStart}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first typing action", func() bool { return f.srv.Typing(1001) > 0 })
	text := strings.TrimSpace(strings.Repeat("word ", 1000)) // 4999 characters: two messages
	started := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- a.Send(ctx, done(text)) }()

	var limited telegramtest.Call
	eventually(t, "the 429", func() bool {
		for _, c := range f.srv.Calls("sendMessage") {
			if c.Status == 429 && c.Params["chat_id"] == "1001" {
				limited = c
				return true
			}
		}
		return false
	})
	answer(t, ch, channels.Target{Channel: telegram.Name, ChatID: "2002", ChatType: channels.ChatDM}, done("not held"))
	b, err := ch.Open(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	file := channels.Part{Type: channels.PartFile, MIME: "text/plain", Name: "notes.txt", Data: []byte("notes")}
	for _, fr := range []channels.Frame{{Type: channels.FrameStart}, {Type: channels.FrameParts, Parts: []channels.Part{file}}, done("")} {
		if err := b.Send(ctx, fr); err != nil {
			t.Fatalf("the second answer's %s: %v", fr.Type, err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("the rate-limited answer: %v", err)
	}
	if took := time.Since(started); took < retryAfter {
		t.Errorf("the rate-limited answer was done in %v; the platform asked to wait %v", took, retryAfter)
	}

	if other := f.srv.Messages(2002); len(other) != 1 || !other[0].Time.Before(limited.Time.Add(retryAfter)) {
		t.Errorf("another chat got %+v; want its answer during the first chat's hold", other)
	}
	var sends int
	for _, c := range f.srv.Calls("") {
		if c.Params["chat_id"] != "1001" {
			continue
		}
		if c.Method == "sendMessage" {
			sends++
		}
		if c.Time.After(limited.Time) && c.Time.Before(limited.Time.Add(retryAfter)) {
			t.Errorf("%s reached the chat %v after a 429 with retry_after %v", c.Method, c.Time.Sub(limited.Time).Round(time.Millisecond), retryAfter)
		}
	}
	if sends != 3 {
		t.Errorf("sendMessage reached the chat %d times; want the refused first message, its second attempt and the second message", sends)
	}
	var got []string
	var files int
	for _, m := range f.srv.Messages(1001) {
		switch m.Kind {
		case "text":
			got = append(got, m.Text)
		case "document":
			files++
		}
	}
	if len(got) != 2 || strings.Join(got, " ") != text || files != 1 {
		t.Errorf("the chat shows %d text messages (%d characters) and %d files; want the answer once, in two messages, and the file", len(got), len(strings.Join(got, " ")), files)
	}
}

// Answers due in many chats at once go out at the bot's rate, 30 a second, in every second
// (5 may go at once): a burst allowance of a second's worth let the first second carry
// nearly twice that, which Telegram answers with 429s.
func TestManyChatsAnsweredAtOnceKeepTheBotsRate(t *testing.T) {
	f := newFixture(t)
	for i := range 45 {
		f.chats(int64(2000 + i))
	}
	opts := f.options()
	opts.Pacing = telegram.Pacing{} // the defaults: 30 a second for the bot
	ch := f.start(f.config(), opts, channeltest.NewSink())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const chats = 45
	errs := make(chan error, chats)
	for i := range chats {
		go func() {
			st, err := ch.Open(ctx, channels.Target{Channel: telegram.Name, ChatID: strconv.Itoa(2000 + i), ChatType: channels.ChatDM})
			if err == nil {
				err = st.Send(ctx, done("answer"))
			}
			errs <- err
		}()
	}
	for range chats {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var times []time.Time
	for i := range chats {
		for _, m := range f.srv.Messages(int64(2000 + i)) {
			times = append(times, m.Time)
		}
	}
	if len(times) != chats {
		t.Fatalf("%d answers sent, want %d", len(times), chats)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	// At 30 a second, 5 at once, the 45 answers take at least (45 - 5) / 30 = 1.33 s from
	// the first to the last. The fake notes when each arrived, which a busy machine delays:
	// a delay bunches arrivals together (a count within a window then overstates the rate)
	// but can shorten the span only by the first answer's delay, allowed here up to 0.33 s.
	// A second's worth of burst, as before, spanned 0.5 s; no pacing, a few milliseconds.
	if span := times[len(times)-1].Sub(times[0]); span < time.Second {
		t.Fatalf("the %d answers went out within %v; the bot's rate (30 a second, 5 at once) needs at least 1.33 s", chats, span)
	}
}
