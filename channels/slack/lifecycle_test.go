package slack

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"gateway/channels"
	"gateway/channels/slack/slacktest"
	"gateway/internal/fakeserver"
)

// lifeClient is an HTTP client of the adapter's own, so that a test can close its idle
// keep-alive connections (whose goroutines belong to net/http, not to the adapter)
// before it looks for goroutines left behind.
func lifeClient() (*http.Client, func()) {
	tr := &http.Transport{}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, tr.CloseIdleConnections
}

// Start and Stop called at once, from several goroutines, at every moment of a start
// (before it, during auth.test, while Socket Mode connects, once up): nothing deadlocks,
// at most one Start succeeds, a down report comes last, and no goroutine is left.
func TestConcurrentStartStopNeitherDeadlocksNorLeaks(t *testing.T) {
	for _, mode := range []string{ModeSocket, ModeEvents} {
		t.Run(mode, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			s := slacktest.New(t)
			hc, closeIdle := lifeClient()
			for i := range 24 {
				cfg := fakeConfig(s)
				cfg.Access = channels.Access{AllowFrom: []string{user}}
				if mode == ModeEvents {
					cfg.Mode, cfg.AppToken, cfg.SigningSecret = ModeEvents, "", slacktest.SigningSecret
				}
				ch, err := New(cfg, Options{Logger: testLogger(t), StateDir: t.TempDir(), HTTPClient: hc})
				if err != nil {
					t.Fatal(err)
				}
				sink := newRecSink()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				delay := time.Duration(i*i) * 50 * time.Microsecond // 0 to 26ms, dense early: every phase of a start

				var wg sync.WaitGroup
				startErrs := make([]error, 2)
				stopErrs := make([]error, 2)
				for k := range 2 {
					wg.Go(func() { startErrs[k] = ch.Start(ctx, sink) })
					wg.Go(func() {
						time.Sleep(delay)
						stopErrs[k] = ch.Stop(ctx)
					})
				}
				done := make(chan struct{})
				go func() { wg.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(15 * time.Second):
					t.Fatalf("round %d: concurrent Start and Stop did not return (deadlock)", i)
				}
				cancel()
				t.Logf("round %d: start %v / %v; reports %v", i, startErrs[0], startErrs[1], sink.reports())

				for _, err := range stopErrs {
					if err != nil {
						t.Fatalf("round %d: Stop: %v", i, err)
					}
				}
				if ok := countNil(startErrs); ok > 1 {
					t.Fatalf("round %d: both concurrent Starts succeeded", i)
				}
				if _, _, ok := ch.running(); ok {
					t.Fatalf("round %d: running after Stop", i)
				}
				if r := sink.reports(); len(r) > 0 && r[len(r)-1] {
					t.Fatalf("round %d: connection reports %v end with up after Stop", i, r)
				}
				if err := ch.Start(context.Background(), sink); !errors.Is(err, channels.ErrStopped) {
					t.Fatalf("round %d: Start after Stop = %v; want ErrStopped", i, err)
				}
			}
			closeIdle()
			s.Close()
			goleak.VerifyNone(t, ignore)
		})
	}
}

func countNil(errs []error) int {
	n := 0
	for _, err := range errs {
		if err == nil {
			n++
		}
	}
	return n
}

// A Start that fails, at auth.test or at the Socket Mode connection, or that runs out of
// time, returns with no goroutine of the adapter left, the fake Slack still running; a
// rejected token is a permanent failure, an outage is not.
func TestFailedStartLeavesNoGoroutine(t *testing.T) {
	s := slacktest.New(t)
	cases := []struct {
		name      string
		mutate    func(*Config)
		timeout   time.Duration
		want      string
		permanent bool
	}{
		{"bot token rejected", func(c *Config) { c.BotToken = rejectedToken }, 10 * time.Second, "the bot token was rejected", true},
		{"bot token rejected, events mode", func(c *Config) {
			c.BotToken, c.Mode, c.AppToken, c.SigningSecret = rejectedToken, ModeEvents, "", slacktest.SigningSecret
		}, 10 * time.Second, "the bot token was rejected", true},
		{"app token rejected", func(c *Config) { c.AppToken = "xapp-1-wrong-app-token" }, 10 * time.Second, "the app token was rejected", true},
		{"Slack unreachable", func(c *Config) { c.APIURL = "http://127.0.0.1:1/api/" }, 300 * time.Millisecond, "cannot reach the Slack API", false},
		{"Socket Mode answering 503", func(*Config) {
			s.FailNext(1000, fakeserver.Failure{Method: "apps.connections.open", Status: http.StatusServiceUnavailable})
		}, 10 * time.Second, "cannot open a Socket Mode connection", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer s.ClearFailures()
			ignore := goleak.IgnoreCurrent() // the fake's own goroutines
			hc, closeIdle := lifeClient()
			cfg := fakeConfig(s)
			c.mutate(&cfg)
			ch, err := New(cfg, Options{Logger: testLogger(t), StateDir: t.TempDir(), HTTPClient: hc})
			if err != nil {
				t.Fatal(err)
			}
			sink := newRecSink()
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			err = ch.Start(ctx, sink)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Start = %v; want an error saying %q", err, c.want)
			}
			if got := errors.Is(err, channels.ErrPermanent); got != c.permanent {
				t.Fatalf("Start = %v: permanent %v; want %v", err, got, c.permanent)
			}
			closeIdle()
			goleak.VerifyNone(t, ignore)
			if err := ch.Stop(context.Background()); err != nil {
				t.Fatalf("Stop after a failed Start: %v", err)
			}
			if r := sink.reports(); slices.Contains(r, true) {
				t.Fatalf("a failed Start reported the connection up: %v", r)
			}
		})
	}
}

// A Start that failed because Socket Mode could not connect (apps.connections.open answering
// 503) says so at once, and the same channel starts once Slack is back and delivers what
// users send.
func TestStartAgainAfterSocketModeWasDown(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	s := slacktest.New(t)
	hc, closeIdle := lifeClient()
	cfg := fakeConfig(s)
	cfg.Access = channels.Access{AllowFrom: []string{user}, DMPolicy: channels.DMAllowlist}
	ch, err := New(cfg, Options{Logger: testLogger(t), StateDir: t.TempDir(), HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	s.FailNext(1000, fakeserver.Failure{Method: "apps.connections.open", Status: http.StatusServiceUnavailable})
	sink := newRecSink()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ch.Start(ctx, sink); err == nil || errors.Is(err, channels.ErrPermanent) {
		t.Fatalf("Start while Socket Mode answers 503 = %v; want a failure that may pass", err)
	}
	s.ClearFailures()
	if err := ch.Start(ctx, sink); err != nil {
		t.Fatalf("Start once Slack is back: %v", err)
	}
	if n := len(s.Calls("apps.connections.open")); n < 2 {
		t.Fatalf("apps.connections.open was called %d times; want the failed one and the next", n)
	}
	s.DM("D4242", user, "hello again")
	if m := sink.Next(t); m.Text() != "hello again" {
		t.Fatalf("delivered %q", m.Text())
	}
	if err := ch.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	closeIdle()
	s.Close()
	goleak.VerifyNone(t, ignore)
}
