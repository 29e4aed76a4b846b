package discord_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
	"gateway/internal/secret"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The lifecycle tests are not parallel: each checks that the goroutines it caused are gone
// before it returns, which needs no other test starting goroutines meanwhile (parallel tests
// wait in t.Parallel, which goleak ignores, until the sequential ones are done).

// Start racing several Stops never deadlocks, at most one Start succeeds, and once the last
// Stop returned no goroutine of the adapter (nor a connection to the fake) is left.
func TestConcurrentStartStop(t *testing.T) {
	srv := discordtest.New(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var started atomic.Int32
	for i := range 10 {
		ch, err := discord.New(discord.Config{Token: secret.Secret(srv.Bot().Token), APIURL: srv.URL, Access: defaultAccess()},
			discord.Options{StateDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var wg sync.WaitGroup
		wg.Add(4)
		go func() {
			defer wg.Done()
			if ch.Start(ctx, channeltest.NewSink()) == nil { // it may win or lose against the Stops
				started.Add(1)
			}
		}()
		for range 3 {
			go func() {
				defer wg.Done()
				if i%2 == 1 {
					time.Sleep(time.Duration(i) * 5 * time.Millisecond) // let some Starts get further
				}
				if err := ch.Stop(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: Start and Stop deadlocked", i)
		}
		if err := ch.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ch.Start(ctx, channeltest.NewSink()); err == nil {
			t.Fatalf("round %d: Start after Stop succeeded", i)
		}
		cancel()
	}
	waitFor(t, "the fake to see every socket closed", func() bool { return srv.Connected() == 0 })
	t.Logf("%d of 10 Starts connected before a Stop", started.Load())
}

// A Start that fails, on a rejected token or on a gateway that never answers, leaves no
// goroutine and no connection behind, and Stop after it is a no-op.
func TestFailedStartLeavesNothing(t *testing.T) {
	srv := discordtest.New(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	ch, err := discord.New(discord.Config{Token: "fake.not-a-real-token.abcdef0123456789", APIURL: srv.URL, Access: defaultAccess()},
		discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(context.Background(), channeltest.NewSink()); err == nil || !strings.Contains(err.Error(), "token was rejected") {
		t.Fatalf("Start with a bad token: %v", err)
	}
	if err := ch.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after a failed Start: %v", err)
	}

	srv.StallGateway(true)
	ch, err = discord.New(discord.Config{Token: secret.Secret(srv.Bot().Token), APIURL: srv.URL, Access: defaultAccess()},
		discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := ch.Start(ctx, channeltest.NewSink()); err == nil {
		t.Fatal("Start against a silent gateway succeeded")
	}
	if err := ch.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after a failed Start: %v", err)
	}
}

// A Start that failed because Discord's gateway was down (503) is no permanent failure,
// and once the gateway is back the same channel starts and delivers messages; a token
// Discord rejects is a permanent failure.
func TestStartAgainAfterTheGatewayWasDown(t *testing.T) {
	srv := discordtest.New(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv.RefuseGateway(true)
	ch, err := discord.New(discord.Config{Token: secret.Secret(srv.Bot().Token), APIURL: srv.URL, Access: defaultAccess()},
		discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sink := channeltest.NewSink()
	err = ch.Start(ctx, sink)
	if err == nil {
		t.Fatal("Start against a refusing gateway succeeded")
	}
	if errors.Is(err, channels.ErrPermanent) {
		t.Fatalf("a gateway answering 503 is a permanent failure: %v", err)
	}
	srv.RefuseGateway(false)
	if err := ch.Start(ctx, sink); err != nil {
		t.Fatalf("Start once the gateway is back: %v", err)
	}
	srv.InjectDM("dm-again", user, "hello again")
	if m := sink.Next(t); m.Text() != "hello again" {
		t.Fatalf("delivered %q", m.Text())
	}
	if err := ch.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	bad, err := discord.New(discord.Config{Token: "fake.not-a-real-token.abcdef0123456789", APIURL: srv.URL, Access: defaultAccess()},
		discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Start(ctx, channeltest.NewSink()); !errors.Is(err, channels.ErrPermanent) {
		t.Fatalf("Start with a rejected token = %v; want a permanent failure", err)
	}
	waitFor(t, "the fake to see every socket closed", func() bool { return srv.Connected() == 0 })
}
