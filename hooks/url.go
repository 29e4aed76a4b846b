package hooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// urlRunner POSTs the event JSON to a URL; the response body is the result JSON.
type urlRunner struct {
	name   string
	url    string
	shown  string // the URL without credentials or query, for errors and logs
	client *http.Client
}

func newURLRunner(s hookSpec, timeout time.Duration, client *http.Client) *urlRunner {
	if client == nil {
		if timeout <= 0 {
			timeout = 30 * time.Second // the bus's timeout normally ends the call earlier
		}
		client = &http.Client{Timeout: timeout}
	} else {
		// The caller's client is shared (the gateway passes the one its providers and
		// channels use, which follows redirects); this copy keeps its transport.
		c := *client
		client = &c
	}
	// A redirected POST would turn into a GET elsewhere; a hook URL answers itself, and a
	// 3xx is a failed hook like any other non-2xx (docs/hooks.md, URL hooks).
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &urlRunner{name: s.Name, url: s.url.String(), shown: redactURL(s.url), client: client}
}

// redactURL drops user info, query and fragment, which may hold tokens.
func redactURL(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = nil, "", false, "", ""
	return c.String()
}

func (u *urlRunner) invoke(ctx context.Context, event string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.url, bytes.NewReader(body))
	if err != nil {
		return nil, &Failure{"its URL could not be called", fmt.Errorf("hook %q: POST %s: bad request", u.name, u.shown)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "gateway-hooks")
	req.Header.Set("X-Gateway-Event", event)
	resp, err := u.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // its message repeats the full URL
			err = ue.Err
		}
		reason := "its URL could not be reached"
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			reason = "its URL did not answer in time"
		}
		return nil, &Failure{reason, fmt.Errorf("hook %q: POST %s: %v", u.name, u.shown, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxOutput+1))
	if err != nil {
		return nil, &Failure{"its URL's answer could not be read", fmt.Errorf("hook %q: POST %s: reading the response: %v", u.name, u.shown, err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// The body (an error page, a stack trace) is for the log, like a program's stderr.
		return nil, &Failure{"its URL answered " + resp.Status,
			fmt.Errorf("hook %q: POST %s: status %s: %s", u.name, u.shown, resp.Status, snippet(bytes.TrimSpace(data)))}
	}
	if len(data) > maxOutput {
		return nil, &Failure{fmt.Sprintf("its URL's answer is larger than %d KiB", maxOutput>>10),
			fmt.Errorf("hook %q: POST %s: response larger than %d KiB", u.name, u.shown, maxOutput>>10)}
	}
	return data, nil
}
