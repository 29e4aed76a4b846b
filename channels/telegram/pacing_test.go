package telegram_test

import (
	"context"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/telegram"
)

// A streaming preview that finds no free send slot for the bot must not use up the chat's
// slot: the final answer would then wait for the chat's next one (here a minute).
func TestSkippedPreviewLeavesTheChatsSendSlot(t *testing.T) {
	f := newFixture(t)
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
