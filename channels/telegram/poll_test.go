package telegram_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"sync/atomic"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/telegram/telegramtest"
	"gateway/internal/fakeserver"
)

// nextWithin waits up to d for a delivered message.
func nextWithin(t *testing.T, sink *channeltest.Sink, d time.Duration) *channels.Message {
	t.Helper()
	select {
	case m := <-sink.Messages():
		return m
	case <-time.After(d):
		t.Fatalf("no message delivered within %v", d)
		return nil
	}
}

// After an outage (getUpdates answering 502 several times in a row), polling retries
// with a wait that stops growing at a few seconds, so a message sent during the outage is
// answered soon after Telegram is back.
func TestPollingRecoversQuicklyAfterAnOutage(t *testing.T) {
	f := newFixture(t)
	const outage = 7
	f.srv.FailNext(outage, fakeserver.Failure{Method: "getUpdates", Status: http.StatusBadGateway})
	sink := channeltest.NewSink()
	f.start(f.config(), f.options(), sink)
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "sent during the outage"})
	if m := nextWithin(t, sink, 60*time.Second); m.Text() != "sent during the outage" {
		t.Fatalf("delivered %q", m.Text())
	}
	calls := f.srv.Calls("getUpdates")
	failed := 0
	for i, c := range calls {
		if c.Status == 502 {
			failed++
		}
		if i == 0 || calls[i-1].Status != 502 {
			continue
		}
		// The cap is 4s; 2s more is slack for a busy machine, far below the 8s and 16s
		// that an uncapped doubling reaches.
		if gap := c.Time.Sub(calls[i-1].Time); gap > 6*time.Second {
			t.Errorf("getUpdates retried %v after a failure (call %d); the backoff should stop growing at a few seconds", gap.Round(time.Millisecond), i+1)
		}
	}
	if failed != outage {
		t.Errorf("%d getUpdates calls failed; want all %d of the outage retried", failed, outage)
	}
}

// A Bot API stand-in that answers getUpdates at once with nothing, rather than holding the
// call as Telegram's long poll does, is not asked in a busy loop: a few calls a second.
func TestPollingDoesNotSpinOnAServerThatDoesNotHoldTheCall(t *testing.T) {
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch path.Base(r.URL.Path) {
		case "getMe":
			fmt.Fprint(w, `{"ok":true,"result":{"id":1,"is_bot":true,"first_name":"bot","username":"the_bot"}}`)
		case "getUpdates":
			polls.Add(1)
			fmt.Fprint(w, `{"ok":true,"result":[]}`)
		default:
			fmt.Fprint(w, `{"ok":true,"result":true}`)
		}
	}))
	t.Cleanup(srv.Close)
	f := newFixture(t)
	cfg := f.config()
	cfg.APIURL = srv.URL
	f.start(cfg, f.options(), channeltest.NewSink())
	time.Sleep(time.Second)
	// Four a second at most; a busy machine only makes fewer. Before, thousands.
	if n := polls.Load(); n == 0 || n > 10 {
		t.Fatalf("getUpdates was called %d times in a second; want a few", n)
	}
}
