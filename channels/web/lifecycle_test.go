package web_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/web"
)

// Start racing Stop, with tabs connecting meanwhile, never deadlocks, reports the connection
// at most once each way, and leaves no goroutine behind: every socket a Start let in is
// closed by the Stop that won.
func TestConcurrentStartStop(t *testing.T) {
	for range 20 {
		ch := web.New(web.Config{}, web.Options{MediaDir: t.TempDir()})
		mux := http.NewServeMux()
		ch.Routes(mux)
		srv := httptest.NewServer(mux)
		sink := channeltest.NewSink()
		wsURL := "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws?chat_id=race"

		var wg sync.WaitGroup
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := ch.Start(ctx, sink); err != nil && !errors.Is(err, channels.ErrStopped) {
				t.Errorf("Start racing Stop: %v; want success or ErrStopped", err)
			}
		})
		for range 3 {
			wg.Go(func() {
				// Stop at once, or once tabs may be open.
				time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := ch.Stop(ctx); err != nil {
					t.Errorf("Stop: %v", err)
				}
			})
			wg.Go(func() { dialAndRead(wsURL) })
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("Start and Stop racing did not return: deadlock")
		}
		if err := ch.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		srv.Close()

		var ups, downs int
		for _, c := range sink.Connections() {
			if c.Up {
				ups++
			} else {
				downs++
			}
		}
		if ups > 1 || downs != ups {
			t.Fatalf("reported connected %d times and disconnected %d times; want at most once, and as often", ups, downs)
		}
	}
	goleak.VerifyNone(t)
}

// dialAndRead plays a tab: it tries to connect for a while (the channel may not have started
// yet) and reads until the socket is closed.
func dialAndRead(url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ws *websocket.Conn
	for deadline := time.Now().Add(40 * time.Millisecond); ws == nil; {
		var err error
		if ws, _, err = websocket.Dial(ctx, url, nil); err != nil {
			if time.Now().After(deadline) {
				return // refused: the channel was not running
			}
			time.Sleep(time.Millisecond)
		}
	}
	defer ws.CloseNow()
	for {
		if _, _, err := ws.Read(ctx); err != nil {
			return
		}
	}
}

// A Start that fails (here: the media directory cannot be made) names the channel, reveals
// no token, reports no connection and leaves nothing running; Stop after it is a no-op.
func TestFailedStartLeavesNothing(t *testing.T) {
	const token = "web-token-s3cret"
	blocker := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A path that holds the token shows that Start's error passes through the scrubber.
	dir := filepath.Join(blocker, token)
	ch := web.New(web.Config{Token: token}, web.Options{MediaDir: dir})
	mux := http.NewServeMux()
	ch.Routes(mux)
	srv := httptest.NewServer(mux)
	sink := channeltest.NewSink()

	err := ch.Start(context.Background(), sink)
	if err == nil {
		t.Fatal("Start with a media directory under a file succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, "web") || strings.Contains(msg, token) {
		t.Errorf("Start error %q; want it to name the channel and not the token", msg)
	}
	if !errors.Is(err, channels.ErrPermanent) {
		t.Errorf("Start error %q is not permanent; the admin must fix the folder, a retry will not", err)
	}
	if n := len(sink.Connections()); n != 0 {
		t.Errorf("a failed Start reported %d connection changes", n)
	}
	resp, err := http.Get(srv.URL + "/ws?chat_id=x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("socket after a failed Start: %s; want 503", resp.Status)
	}
	if _, err := ch.Open(context.Background(), channels.Target{ChatID: "x"}); err == nil {
		t.Error("Open after a failed Start succeeded")
	}
	if err := ch.Stop(context.Background()); err != nil {
		t.Errorf("Stop after a failed Start: %v", err)
	}
	if n := len(sink.Connections()); n != 0 {
		t.Errorf("Stop after a failed Start reported %d connection changes", n)
	}
	srv.Close()
	goleak.VerifyNone(t)
}
