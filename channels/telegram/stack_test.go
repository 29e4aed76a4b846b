package telegram_test

import (
	"context"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
)

// An answer waiting for its send slot holds a small stack. A turn sends its frames from
// deep in the model's read loop and then waits, on the same goroutine, for the chat's slot
// for its final text (seconds when a hundred answers are due at once). The streaming
// preview's Markdown render and Telegram call, made on that goroutine, doubled its stack
// to 16 KB, kept for the whole wait; they now run on a goroutine of their own.
func TestWaitingAnswersHoldSmallStacks(t *testing.T) {
	if raceBuild {
		t.Skip("the race detector's frames are larger: not measured")
	}
	f := newFixture(t)
	opts := f.options()
	opts.Pacing.GlobalPerSecond = 1 // the final texts queue for the bot's slot
	opts.EditInterval = time.Millisecond
	ch := f.start(f.config(), opts, channeltest.NewSink())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()

	md := "Here is **the answer**, with `code`, a [link](https://example.com) and a list:\n\n" +
		strings.Repeat("- an item with *emphasis* and ~~struck~~ words\n", 20)
	answer := func(chat int, previewed chan<- struct{}) {
		st, err := ch.Open(ctx, channels.Target{Channel: "telegram", ChatID: strconv.Itoa(chat), ChatType: channels.ChatDM})
		if err != nil {
			t.Error(err)
			return
		}
		// The frames come from as deep as a turn's: the deltas from the model's read loop
		// (about 4.5 KB), the final text from the end of the turn (about 1 KB).
		deep(4500, func() { _ = st.Send(ctx, channels.Frame{Type: channels.FrameDelta, Text: md}) })
		previewed <- struct{}{}
		deep(1000, func() { _ = st.Send(ctx, done(md)) })
	}
	// One answer first: it takes the bot's slot, and the HTTP connection is open.
	first := make(chan struct{}, 1)
	answer(1000, first)

	const answers = 40
	before := stackBytes()
	previewed := make(chan struct{}, answers)
	for i := range answers {
		wg.Go(func() { answer(2000+i, previewed) })
	}
	for range answers {
		<-previewed
	}
	time.Sleep(100 * time.Millisecond) // every final text is waiting for its slot by then
	per := (stackBytes() - before) / answers
	t.Logf("%.1f KB of stack per answer waiting for its send slot", float64(per)/1024)
	if per > 9<<10 {
		t.Errorf("%.1f KB of stack per answer waiting for its send slot; want at most 9 KB (8 KB, not 16)", float64(per)/1024)
	}
}

// deep calls fn under about n bytes of frames.
func deep(n int, fn func()) {
	var pad [256]byte
	if n <= len(pad) {
		fn()
		return
	}
	deep(n-len(pad), fn)
	runtime.KeepAlive(&pad)
}

// stackBytes is the memory of goroutine stacks after a collection (which shrinks stacks
// that use little of theirs).
func stackBytes() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// The streaming preview goes out beside the model's stream: a delta that comes while a
// preview is in flight only adds to the text, and the final text waits for the preview,
// then shows the whole answer in the preview's message.
func TestPreviewRunsBesideTheStreamAndFinalTextFollowsIt(t *testing.T) {
	f := newFixture(t)
	f.chats(1001)
	opts := f.options()
	opts.EditInterval = time.Millisecond
	ch := f.start(f.config(), opts, channeltest.NewSink())
	f.srv.Slow("sendMessage", 300*time.Millisecond)
	ctx := context.Background()
	st, err := ch.Open(ctx, channels.Target{Channel: "telegram", ChatID: "1001", ChatType: channels.ChatDM})
	if err != nil {
		t.Fatal(err)
	}
	for _, piece := range []string{"Hello", " there", ", world"} {
		if err := st.Send(ctx, channels.Frame{Type: channels.FrameDelta, Text: piece}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(f.srv.Calls("sendMessage")); n > 1 {
		t.Errorf("%d previews sent while the first was in flight; want at most that one", n)
	}
	if err := st.Send(ctx, done("")); err != nil {
		t.Fatal(err)
	}
	msgs := f.srv.Messages(1001)
	if len(msgs) != 1 || msgs[0].Text != "Hello there, world" {
		t.Fatalf("the chat shows %+v; want one message with the whole answer", msgs)
	}
	var methods []string
	for _, c := range f.srv.Calls("") {
		if c.Params["chat_id"] == "1001" && c.Method != "sendChatAction" {
			methods = append(methods, c.Method+" "+c.Params["text"])
		}
	}
	if want := []string{"sendMessage Hello", "editMessageText Hello there, world"}; strings.Join(methods, "|") != strings.Join(want, "|") {
		t.Errorf("calls to the chat: %q; want %q", methods, want)
	}
}

// Stopping the channel cuts a preview in flight short: Stop waits for the preview's
// goroutine, and does not wait out a slow Telegram.
func TestStopCutsAPreviewInFlight(t *testing.T) {
	f := newFixture(t)
	opts := f.options()
	opts.EditInterval = time.Millisecond
	ch := f.start(f.config(), opts, channeltest.NewSink())
	f.srv.Slow("sendMessage", time.Hour)
	ctx := context.Background()
	st, err := ch.Open(ctx, channels.Target{Channel: "telegram", ChatID: "1001", ChatType: channels.ChatDM})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(ctx, channels.Frame{Type: channels.FrameDelta, Text: "Hello"}); err != nil {
		t.Fatal(err)
	}
	// The preview's call now waits on the slow fake (or is about to make it).
	stop(t, ch) // fails past its deadline if the preview held it
}
