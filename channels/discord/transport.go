package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxBucketWait caps how long a rate-limit header may make discordgo's own bucket sleep:
// that sleep takes no context, so a huge value would stall a send past Stop.
const maxBucketWait = 30 * time.Second

// apiError is a 429 or 5xx answer, turned into an error by transport before discordgo
// sees it, so that discordgo never sleeps or retries on its own and we keep the
// platform's retry_after (from the body or the headers).
type apiError struct {
	Code       int
	Status     string
	RetryAfter time.Duration
	Global     bool
	Message    string
}

func (e *apiError) Error() string {
	s := "Discord answered " + e.Status
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	}
	return s
}

// transport points discordgo at api_url without touching its package-level Endpoint*
// variables: every request to discord.com is rewritten to the configured base, so no
// call can escape to the real host, and two channels in one process may use different
// URLs. It also classifies 429/5xx (see apiError) and caps bucket headers.
type transport struct {
	base    http.RoundTripper
	api     *url.URL // nil: talk to Discord itself
	ownBase bool     // base was made for this channel (not Options.HTTPClient's)
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if u, ok := rebase(t.api, req.URL); ok {
		r := req.Clone(req.Context())
		r.URL, r.Host = u, ""
		req = r
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return nil, parseAPIError(resp, body)
	}
	if v := resp.Header.Get("X-RateLimit-Reset-After"); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err != nil || f > maxBucketWait.Seconds() {
			resp.Header.Set("X-RateLimit-Reset-After", strconv.Itoa(int(maxBucketWait.Seconds())))
		}
	}
	return resp, nil
}

// rebase returns where a request for u goes: under api, when api is set and u is Discord's.
func rebase(api, u *url.URL) (*url.URL, bool) {
	if api == nil || (u.Host != "discord.com" && u.Host != "discordapp.com") {
		return u, false
	}
	v := *u
	v.Scheme, v.Host = api.Scheme, api.Host
	v.Path = strings.TrimSuffix(api.Path, "/") + u.Path
	v.RawPath = ""
	return &v, true
}

// calledURL makes a REST error name the URL really called: net/http names the request's
// own URL, discord.com, even when the transport sent it to api_url. An interaction's token
// (a credential for 15 minutes) is hidden.
func calledURL(api *url.URL, err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	u, perr := url.Parse(ue.URL)
	if perr != nil {
		return err
	}
	u, _ = rebase(api, u)
	parts := strings.Split(u.Path, "/")
	for i := 0; i+2 < len(parts); i++ {
		if parts[i] == "webhooks" || parts[i] == "interactions" { // …/{id}/{token}/…
			parts[i+2] = "***"
		}
	}
	u.Path = strings.Join(parts, "/")
	u.RawPath = u.Path  // so that *** reads as written, not %2A%2A%2A
	ue.URL = u.String() // the error is this call's own, made by net/http for it
	return err
}

// CloseIdleConnections closes the idle keep-alive connections, and so their goroutines,
// of a base transport made for this channel; a shared one is left to its owner.
// http.Client.CloseIdleConnections reaches it; a stopped channel calls it.
func (t *transport) CloseIdleConnections() {
	if ci, ok := t.base.(interface{ CloseIdleConnections() }); ok && t.ownBase {
		ci.CloseIdleConnections()
	}
}

func parseAPIError(resp *http.Response, body []byte) *apiError {
	e := &apiError{Code: resp.StatusCode, Status: resp.Status}
	var b struct {
		Message    string   `json:"message"`
		RetryAfter *float64 `json:"retry_after"`
		Global     bool     `json:"global"`
	}
	if json.Unmarshal(body, &b) == nil {
		e.Message, e.Global = b.Message, b.Global
		if b.RetryAfter != nil && *b.RetryAfter > 0 {
			e.RetryAfter = time.Duration(*b.RetryAfter * float64(time.Second))
		}
	}
	if e.RetryAfter == 0 {
		e.RetryAfter = headerWait(resp.Header)
	}
	if e.Code == http.StatusTooManyRequests && e.RetryAfter == 0 {
		e.RetryAfter = time.Second // a 429 without a hint: wait a little rather than hammer
	}
	return e
}

func headerWait(h http.Header) time.Duration {
	if v := h.Get("Retry-After"); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			return time.Duration(f * float64(time.Second))
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(time.Until(t), 0)
		}
	}
	if v := h.Get("X-RateLimit-Reset-After"); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			return time.Duration(f * float64(time.Second))
		}
	}
	return 0
}

// dialer dials the gateway for discordgo. discordgo's Open blocks on the socket without
// a context; binding a context makes a dial abort with it, and closeAll unblocks reads.
type dialer struct {
	mu    sync.Mutex
	bound context.Context
	conns map[*trackedConn]struct{}
}

func newDialer() *dialer { return &dialer{conns: map[*trackedConn]struct{}{}} }

// bind makes dials abort when ctx ends, until the returned func is called.
func (d *dialer) bind(ctx context.Context) func() {
	d.mu.Lock()
	d.bound = ctx
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		d.bound = nil
		d.mu.Unlock()
	}
}

func (d *dialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	bound := d.bound
	d.mu.Unlock()
	if bound != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(bound, cancel)()
	}
	nd := net.Dialer{Timeout: 15 * time.Second, KeepAlive: 30 * time.Second}
	conn, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: conn, d: d}
	d.mu.Lock()
	d.conns[tc] = struct{}{}
	d.mu.Unlock()
	return tc, nil
}

// live counts the gateway sockets not yet closed.
func (d *dialer) live() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

// closeAll closes every gateway socket, which makes discordgo's blocked reads fail.
func (d *dialer) closeAll() {
	d.mu.Lock()
	conns := make([]*trackedConn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

type trackedConn struct {
	net.Conn
	d    *dialer
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.d.mu.Lock()
		delete(c.d.conns, c)
		c.d.mu.Unlock()
	})
	return c.Conn.Close()
}
