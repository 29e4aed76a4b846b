package telegram_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/internal/secret"
)

// responder answers every delivered message at once with start and done, like a gateway
// whose agent needs no time.
type responder struct {
	*channeltest.Sink
	ch *telegram.Channel
	wg sync.WaitGroup
}

func (r *responder) Deliver(_ context.Context, m *channels.Message) error {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		st, err := r.ch.Open(ctx, channels.TargetOf(m))
		if err != nil {
			return
		}
		_ = st.Send(ctx, channels.Frame{Type: channels.FrameStart})
		_ = st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "re:" + m.Text()})
	}()
	return nil
}

// BenchmarkThroughput sends 1,000 messages over 100 chats through the fake and an instant
// responder, and reports messages per second and the latency from injecting the update to
// the fake seeing the answer's sendMessage. "telegram-pacing" uses Telegram's limits
// (30/s for the bot, 1/s per chat); "per-chat-only" drops the bot-wide limit; "unpaced"
// turns the limiter off to show the adapter's own cost. Run with -benchtime=1x.
func BenchmarkThroughput(b *testing.B) {
	for _, bc := range []struct {
		name   string
		pacing telegram.Pacing
	}{
		{"unpaced", telegram.Pacing{GlobalPerSecond: -1, PerChatInterval: -1, GroupInterval: -1}},
		{"per-chat-only", telegram.Pacing{GlobalPerSecond: -1}},
		{"telegram-pacing", telegram.Pacing{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				throughputRun(b, bc.pacing)
			}
		})
	}
}

func throughputRun(b *testing.B, pacing telegram.Pacing) {
	const chats, perChat = 100, 10
	srv := telegramtest.NewServer(b)
	ch, err := telegram.New(
		telegram.Config{Enabled: true, Token: secret.Secret(telegramtest.Token), APIURL: srv.URL, Access: channels.Access{DMPolicy: channels.DMOpen}},
		telegram.Options{Logger: slog.New(slog.DiscardHandler), StateDir: b.TempDir(), Pacing: pacing})
	if err != nil {
		b.Fatal(err)
	}
	r := &responder{Sink: channeltest.NewSink(), ch: ch}
	if err := ch.Start(context.Background(), r); err != nil {
		b.Fatal(err)
	}
	injected := map[string]time.Time{}
	start := time.Now()
	for i := range perChat {
		for c := range chats {
			tag := fmt.Sprintf("c%d-m%d", c, i)
			injected[tag] = time.Now()
			srv.Send(telegramtest.Update{ChatID: int64(5000 + c), Text: tag})
		}
	}
	var lat []time.Duration
	var last time.Time
	deadline := time.Now().Add(5 * time.Minute)
	for len(lat) < chats*perChat {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d answers arrived", len(lat), chats*perChat)
		}
		time.Sleep(50 * time.Millisecond)
		lat = lat[:0]
		for c := range chats {
			for _, m := range srv.Messages(int64(5000 + c)) {
				if at, ok := injected[strings.TrimPrefix(m.Text, "re:")]; ok {
					lat = append(lat, m.Time.Sub(at))
					if m.Time.After(last) {
						last = m.Time
					}
				}
			}
		}
	}
	b.StopTimer()
	r.wg.Wait()
	if err := ch.Stop(context.Background()); err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/last.Sub(start).Seconds(), "msgs/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.StartTimer()
}
