package discord

import (
	"context"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/discord/discordtest"
	"gateway/internal/secret"
)

func TestTypingRefreshesUntilDone(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	c, err := New(Config{Token: secret.Secret(srv.Bot().Token), APIURL: srv.URL}, Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c.typingEvery = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Start(ctx, channeltest.NewSink()); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	srv.AddDM("790")
	st, err := c.Open(ctx, channels.Target{ChatID: "790", ChatType: channels.ChatDM})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(ctx, channels.Frame{Type: channels.FrameStart}); err != nil {
		t.Fatal(err)
	}
	for srv.Typing("790") < 4 {
		if ctx.Err() != nil {
			t.Fatalf("typing sent %d times while the turn ran; want it refreshed", srv.Typing("790"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "done"}); err != nil {
		t.Fatal(err)
	}
	n := srv.Typing("790")
	time.Sleep(400 * time.Millisecond)
	if m := srv.Typing("790"); m > n+1 {
		t.Errorf("typing went on after done: %d more", m-n)
	}
}
