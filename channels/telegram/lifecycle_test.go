package telegram_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/internal/fakeserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A Start that fails (the fake rejects the token) leaves no goroutine behind and says the
// failure is permanent; Stop after it is a no-op, and a Start after that Stop is refused.
func TestFailedStartLeavesNoGoroutine(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.Token = badToken
	before := goleak.IgnoreCurrent() // the fake and the test's own
	ch, err := telegram.New(cfg, f.options())
	if err != nil {
		t.Fatal(err)
	}
	sink := channeltest.NewSink()
	if err := ch.Start(context.Background(), sink); !errors.Is(err, channels.ErrPermanent) {
		t.Fatalf("Start with a rejected token = %v; want a permanent failure", err)
	}
	goleak.VerifyNone(t, before)
	stop(t, ch)
	if err := ch.Start(context.Background(), sink); !errors.Is(err, channels.ErrStopped) {
		t.Errorf("Start after a failed Start = %v; want ErrStopped", err)
	}
	if c := sink.Connections(); len(c) != 0 {
		t.Errorf("a failed Start reported connections %+v", c)
	}
}

// Start and Stop called at once, at every point of the start-up (getMe held back a
// little so that Stop lands in the middle), neither deadlock nor leave a goroutine, and
// never leave the channel reported connected.
func TestConcurrentStartStop(t *testing.T) {
	f := newFixture(t)
	before := goleak.IgnoreCurrent()
	for i := range 12 {
		if i%2 == 0 {
			f.srv.Slow("getMe", time.Duration(i)*5*time.Millisecond)
		} else {
			f.srv.Slow("getMe", 0)
		}
		ch, err := telegram.New(f.config(), f.options())
		if err != nil {
			t.Fatal(err)
		}
		sink := channeltest.NewSink()
		var wg sync.WaitGroup
		var startErr, stopErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			startErr = ch.Start(context.Background(), sink)
		}()
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 3 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stopErr = ch.Stop(ctx)
		}()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: Start and Stop at once did not return (deadlock)", i)
		}
		if stopErr != nil {
			t.Fatalf("round %d: Stop: %v", i, stopErr)
		}
		if startErr != nil && !errors.Is(startErr, channels.ErrStopped) {
			t.Errorf("round %d: Start failed with %v; want success or ErrStopped", i, startErr)
		}
		stop(t, ch) // a second Stop is a no-op
		if c := sink.Connections(); len(c) > 0 && c[len(c)-1].Up {
			t.Errorf("round %d: after Stop the channel is reported connected (%+v)", i, c)
		}
		if _, err := ch.Open(context.Background(), channels.Target{Channel: telegram.Name, ChatID: "1001"}); err == nil {
			t.Errorf("round %d: Open after Stop succeeded", i)
		}
		goleak.VerifyNone(t, before)
	}
}

// A Start that failed because the Bot API was down (502 on every call) is no permanent
// failure, leaves no goroutine behind, and the same channel starts once the API is back and
// delivers what users send.
func TestStartAgainAfterTheBotAPIWasDown(t *testing.T) {
	f := newFixture(t)
	before := goleak.IgnoreCurrent()
	ch, err := telegram.New(f.config(), f.options())
	if err != nil {
		t.Fatal(err)
	}
	f.srv.FailNext(1000, fakeserver.Failure{Method: "getMe", Status: http.StatusBadGateway})
	sink := channeltest.NewSink()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = ch.Start(ctx, sink)
	if err == nil {
		t.Fatal("Start succeeded while the Bot API answered 502")
	}
	if errors.Is(err, channels.ErrPermanent) {
		t.Fatalf("a Bot API answering 502 is a permanent failure: %v", err)
	}
	if n := len(f.srv.Calls("getMe")); n < 2 {
		t.Fatalf("getMe was tried %d times; want the start-up call retried", n)
	}
	goleak.VerifyNone(t, before)
	f.srv.ClearFailures()
	if err := ch.Start(ctx, sink); err != nil {
		t.Fatalf("Start once the Bot API is back: %v", err)
	}
	defer stop(t, ch)
	f.srv.Send(telegramtest.Update{ChatID: telegramtest.UserID, Text: "hello again"})
	if m := sink.Next(t); m.Text() != "hello again" {
		t.Fatalf("delivered %q", m.Text())
	}
}

// A Bot API stand-in that has no deleteWebhook (404 to it, while getMe took the token)
// still gets a polling bot: the channel starts and delivers what users send. A 400 to it,
// a refusal of the real API, still stops the start.
func TestStartPollsWhenTheBotAPIHasNoDeleteWebhook(t *testing.T) {
	f := newFixture(t)
	f.srv.FailNext(1, fakeserver.Failure{Method: "deleteWebhook", Status: http.StatusNotFound, Message: "Not Found"})
	sink := channeltest.NewSink()
	f.start(f.config(), f.options(), sink)
	f.srv.Send(telegramtest.Update{ChatID: telegramtest.UserID, Text: "hello"})
	if m := sink.Next(t); m.Text() != "hello" {
		t.Fatalf("delivered %q", m.Text())
	}

	g := newFixture(t)
	g.srv.FailNext(1, fakeserver.Failure{Method: "deleteWebhook", Status: http.StatusBadRequest})
	other, err := telegram.New(g.config(), g.options())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := other.Start(ctx, channeltest.NewSink()); !errors.Is(err, channels.ErrPermanent) {
		t.Fatalf("a 400 to deleteWebhook started the channel (%v); want a permanent failure", err)
	}
}
