package telegram_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/state"
)

// In cluster mode two processes run the same bot: only the one holding the polling hold
// polls, the other still sends; when the hold is lost, polling stops there and the other
// takes over, and every update is delivered once, in all.
func TestOnlyTheHolderPollsAndTheHoldMoves(t *testing.T) {
	f := newFixture(t)
	f.srv.HoldConfirm(true) // only the shared saved offset keeps updates from coming twice
	db, err := state.Open(filepath.Join(t.TempDir(), "state"), state.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	h := channeltest.NewHolds()
	type proc struct {
		ch   *telegram.Channel
		sink *channeltest.Sink
		logs *channeltest.LogBuffer
	}
	start := func(who string) proc {
		opts := f.options()
		opts.StateDir = t.TempDir()
		opts.State, opts.Holder = db, h.As(who)
		logs := &channeltest.LogBuffer{}
		opts.Logger = logs.Logger()
		p := proc{sink: channeltest.NewSink(), logs: logs}
		p.ch = f.start(f.config(), opts, p.sink)
		return p
	}
	a := start("a")
	eventually(t, "a to hold the polling", func() bool { return h.Owner() == "a" })
	b := start("b") // Start returns without the hold
	eventually(t, "b to ask for the hold", func() bool { return h.AskedBy("b") > 0 })
	if h.Owner() != "a" {
		t.Fatalf("holder %q; want a", h.Owner())
	}

	var all []string
	send := func(from, n int) {
		for i := from; i < from+n; i++ {
			f.srv.Send(telegramtest.Update{ChatID: 1001, Text: fmt.Sprint("m", i)})
		}
	}
	collect := func(p proc, n int) {
		t.Helper()
		for range n {
			all = append(all, p.sink.Next(t).Text())
		}
	}
	send(0, 5)
	collect(a, 5)
	b.sink.ExpectNone(t, 300*time.Millisecond)

	// The process without the hold sends.
	answer(t, b.ch, channels.Target{Channel: telegram.Name, ChatID: "1001"}, done("from b"))
	if msgs := f.srv.Messages(1001); len(msgs) == 0 || msgs[len(msgs)-1].Text != "from b" {
		t.Fatalf("the process without the polling hold did not send: %+v", msgs)
	}
	eventually(t, "b's log to say polling is held elsewhere", func() bool {
		return strings.Contains(b.logs.String(), "polling held elsewhere")
	})

	// a gives the hold up: its polling stops and saves its offset, then b polls. (A lease
	// lost while its holder still polls can repeat a batch: the gateway's dedup drops it.)
	handOver := func(from string) {
		t.Helper()
		asked := h.AskedBy(from)
		h.Pause(true)
		h.Lose(from)
		eventually(t, from+" to stop polling and ask for the hold again", func() bool { return h.AskedBy(from) > asked })
		h.Pause(false)
	}
	handOver("a")
	eventually(t, "b to hold the polling", func() bool { return h.Owner() == "b" })
	send(5, 5)
	collect(b, 5)
	a.sink.ExpectNone(t, 300*time.Millisecond)

	// And back: b gives it up, a polls again.
	handOver("b")
	eventually(t, "a to hold the polling again", func() bool { return h.Owner() == "a" })
	send(10, 3)
	collect(a, 3)
	b.sink.ExpectNone(t, 300*time.Millisecond)

	want := make([]string, 0, 13)
	for i := range 13 {
		want = append(want, fmt.Sprint("m", i))
	}
	if !slices.Equal(all, want) {
		t.Fatalf("delivered %q; want each update once, in order: %q", all, want)
	}
	la, lb := a.logs.String(), b.logs.String()
	if strings.Count(la, "telegram: polling here") != 2 || strings.Count(la, "polling held elsewhere") != 1 {
		t.Errorf("a's log tells polling here/elsewhere %d/%d times; want 2/1 (once per change):\n%s",
			strings.Count(la, "telegram: polling here"), strings.Count(la, "polling held elsewhere"), la)
	}
	if strings.Count(lb, "telegram: polling here") != 1 || strings.Count(lb, "polling held elsewhere") != 2 {
		t.Errorf("b's log tells polling here/elsewhere %d/%d times; want 1/2:\n%s",
			strings.Count(lb, "telegram: polling here"), strings.Count(lb, "polling held elsewhere"), lb)
	}
}

// Webhook mode takes Telegram's POSTs in every process: it never asks for the hold.
func TestWebhookModeIgnoresTheHolder(t *testing.T) {
	f := newFixture(t)
	h := channeltest.NewHolds()
	if _, _, err := h.As("someone else").Hold(context.Background(), "conn.telegram"); err != nil {
		t.Fatal(err)
	}
	cfg := f.config()
	cfg.Mode, cfg.WebhookSecret = telegram.ModeWebhook, "hook-secret-0123456789"
	opts := f.options()
	opts.Holder = h.As("a")
	f.start(cfg, opts, channeltest.NewSink())
	time.Sleep(100 * time.Millisecond)
	if n := h.AskedBy("a"); n != 0 {
		t.Fatalf("webhook mode asked for the polling hold %d times", n)
	}
}

// gate is a shared budget that lets no send go until it is opened.
type gate struct {
	open  chan struct{}
	takes atomic.Int32
}

func (g *gate) Take(ctx context.Context) error {
	g.takes.Add(1)
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The bot's send rate is shared with the other processes (Options.Budget): an answer waits
// for it, while the start-up calls, which are not sends to a chat, do not.
func TestSendsTakeTheSharedBudget(t *testing.T) {
	f := newFixture(t)
	f.chats(1001)
	g := &gate{open: make(chan struct{})}
	opts := f.options()
	opts.Budget = g
	ch := f.start(f.config(), opts, channeltest.NewSink()) // getMe and friends went
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		answer(t, ch, channels.Target{Channel: telegram.Name, ChatID: "1001"}, done("shared"))
	}()
	eventually(t, "the answer to wait for the budget", func() bool { return g.takes.Load() > 0 })
	time.Sleep(200 * time.Millisecond)
	if n := len(f.srv.Messages(1001)); n != 0 {
		t.Fatalf("%d messages sent before the shared budget allowed one", n)
	}
	close(g.open)
	select {
	case <-sent:
	case <-time.After(30 * time.Second):
		t.Fatal("the answer did not go once the budget allowed it")
	}
	if msgs := f.srv.Messages(1001); len(msgs) != 1 || msgs[0].Text != "shared" {
		t.Fatalf("sent %+v", msgs)
	}
}
