package telegram_test

import (
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
	// The typing action takes the bot's only slot of this second, so the preview is skipped.
	answer(t, ch, target,
		channels.Frame{Type: channels.FrameStart},
		channels.Frame{Type: channels.FrameDelta, Text: "Hel"},
		done("Hello"))
	if m := f.srv.Messages(1001); len(m) != 1 || m[0].Text != "Hello" {
		t.Fatalf("chat shows %+v; want the answer", m)
	}
}
