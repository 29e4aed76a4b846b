package discord

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/discord/discordtest"
	"gateway/internal/fakeserver"
)

func TestTransportRewritesAndClassifies(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.Path)
		switch r.URL.Path {
		case "/proxy/api/v9/slow":
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte("<html>slow down</html>"))
		case "/proxy/api/v9/down":
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.Header().Set("X-RateLimit-Reset-After", "9999")
			w.Write([]byte("{}"))
		}
	}))
	defer srv.Close()
	api, _ := url.Parse(srv.URL + "/proxy/")
	client := &http.Client{Transport: &transport{base: http.DefaultTransport, api: api}}

	resp, err := client.Get("https://discord.com/api/v9/users/@me")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got[0] != "/proxy/api/v9/users/@me" {
		t.Errorf("request reached %q; want it under api_url's path", got[0])
	}
	if v := resp.Header.Get("X-RateLimit-Reset-After"); v != "30" {
		t.Errorf("bucket wait header %q; want it capped to 30", v)
	}

	_, err = client.Get("https://discord.com/api/v9/slow")
	var ae *apiError
	if !errors.As(err, &ae) || ae.Code != 429 || ae.RetryAfter != 3*time.Second {
		t.Errorf("429 with only a Retry-After header: %v", err)
	}
	_, err = client.Get("https://discord.com/api/v9/down")
	if !errors.As(err, &ae) || ae.Code != 503 {
		t.Errorf("503: %v", err)
	}
	if retryable(err) == err {
		t.Errorf("a 503 is not marked for retry")
	}
}

type closeCounter struct {
	http.RoundTripper
	closed int
}

func (c *closeCounter) CloseIdleConnections() { c.closed++ }

// A stopped channel closes the idle connections of a transport it made, never those of
// one it was given (Options.HTTPClient is shared with the rest of the gateway).
func TestTransportClosesOnlyItsOwnIdleConnections(t *testing.T) {
	own, shared := &closeCounter{}, &closeCounter{}
	(&http.Client{Transport: &transport{base: own, ownBase: true}}).CloseIdleConnections()
	(&http.Client{Transport: &transport{base: shared}}).CloseIdleConnections()
	if own.closed != 1 || shared.closed != 0 {
		t.Fatalf("closed own %d times, shared %d times; want 1 and 0", own.closed, shared.closed)
	}
}

// A failed send's error names the URL the request went to (api_url), not discord.com,
// whose address it never reached: an admin reading the log looks at the right server.
func TestSendErrorNamesTheURLCalled(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	c, ctx := startFake(t, srv, time.Hour)
	srv.FailNext(5, fakeserver.Failure{RetryAfter: 20 * time.Millisecond, Method: "createMessage", Chat: "dm-r"})
	st, err := c.Open(ctx, channels.Target{ChatID: "dm-r", ChatType: channels.ChatDM})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "hello"})
	if err == nil {
		t.Fatal("the send succeeded through five 429s")
	}
	if want := srv.URL + "/api/v9/channels/dm-r/messages"; !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "discord.com") {
		t.Fatalf("error %q; want it to name %s", err, want)
	}
	if !strings.Contains(err.Error(), "429") {
		t.Errorf("error %q does not say Discord answered 429", err)
	}
}
