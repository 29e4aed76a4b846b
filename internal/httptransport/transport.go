// Package httptransport is the gateway's outbound HTTP transport. Calls to plain-HTTP
// endpoints (a local model server, a local Bot API server, a speech server on the same
// host) are HTTP/1.1 made on the caller's goroutine: the request is written and the
// response read by the goroutine that asked, with no goroutine held per connection.
// Everything else (TLS, proxies, upgrades) goes to a fallback, an http.Transport.
//
// Why by hand: net/http's Transport runs a read and a write goroutine for every open
// HTTP/1.1 connection and hands each call between them. A turn waiting on a local model
// held both (8 KB of stacks) for the whole call, and every Telegram call woke three
// goroutines instead of one (docs/bench.md, issue 17, tenth pass). No library offers an
// http.RoundTripper without them; the wire format is still net/http's own
// (Request.Write, http.ReadResponse).
//
// One difference follows from it: a request's body is written whole before the response
// is read. A server that answers early (a 413 to an upload) and stops reading holds the
// call until its context ends; net/http would return that answer.
package httptransport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for the zero values of Transport's fields.
const (
	defaultMaxIdlePerHost = 2
	defaultMaxIdle        = 100
	defaultIdleTimeout    = 90 * time.Second
	defaultBufferSize     = 4 << 10
	// maxHeaderBytes bounds a response's status line and headers, as net/http's
	// MaxResponseHeaderBytes does.
	maxHeaderBytes = 1 << 20
)

// Transport is an http.RoundTripper. Its zero value is not usable: Fallback is required.
type Transport struct {
	// Fallback takes every request this transport does not make itself: https, a request
	// that a proxy applies to, a protocol upgrade.
	Fallback http.RoundTripper
	// Proxy, when set, is asked for each plain-HTTP request; one it returns a proxy for
	// goes to Fallback (usually the fallback's own Proxy function).
	Proxy func(*http.Request) (*url.URL, error)
	// DialContext dials a connection; nil means a net.Dialer with a 30 s timeout and
	// 30 s keep-alives.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxIdlePerHost and MaxIdle bound the connections kept open between calls, per
	// host and in all; IdleTimeout closes one kept longer than that.
	MaxIdlePerHost int
	MaxIdle        int
	IdleTimeout    time.Duration
	// BufferSize is the size of each connection's read buffer and of the write buffer a
	// call uses; a body larger than that is read and written past them.
	BufferSize int

	// writers are the write buffers, lent to a call while it writes its request: a call
	// waiting for its response (a model thinking for seconds) then holds only its read
	// buffer.
	writers sync.Pool

	mu    sync.Mutex
	idle  map[string][]*conn // per host:port, oldest first
	nidle int
	sweep *time.Timer
}

type conn struct {
	nc      net.Conn
	lr      io.LimitedReader // the reader under br: bounds headers, unbounded for bodies
	br      *bufio.Reader
	written int64 // bytes written to nc on the current call
	idleAt  time.Time
	reused  bool
}

func (c *conn) Write(p []byte) (int, error) {
	n, err := c.nc.Write(p)
	c.written += int64(n)
	return n, err
}

// aLongTimeAgo is a deadline that makes a blocked read or write return at once.
var aLongTimeAgo = time.Unix(1, 0)

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.ownsRequest(req) {
		return t.Fallback.RoundTrip(req)
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	for {
		c, err := t.get(req.Context(), addr)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := t.call(c, addr, req)
		if err == nil {
			return resp, nil
		}
		// A connection kept from an earlier call may have been closed by the server just
		// as this call began. The call is made again on a new connection only when the
		// server cannot have acted on it, as net/http does.
		if !c.reused || !retryable(req, err, c.written) {
			closeBody(req)
			return nil, err
		}
		if req, err = rewind(req); err != nil {
			return nil, err
		}
	}
}

// ownsRequest says whether this transport makes the call itself.
func (t *Transport) ownsRequest(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		return false
	}
	if req.Header.Get("Upgrade") != "" {
		return false
	}
	if t.Proxy != nil {
		if u, err := t.Proxy(req); err != nil || u != nil {
			return false
		}
	}
	return true
}

// errNoResponse marks a call whose connection ended before any byte of the response.
type errNoResponse struct{ err error }

func (e errNoResponse) Error() string {
	return fmt.Sprintf("http: connection closed before the response: %v", e.err)
}
func (e errNoResponse) Unwrap() error { return e.err }

// call writes req on c and reads the response's head; the body is read by the caller.
func (t *Transport) call(c *conn, addr string, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		c.nc.Close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	c.written = 0
	if err := t.write(c, req); err != nil {
		return fail(err)
	}
	c.lr.N = maxHeaderBytes
	if _, err := c.br.Peek(1); err != nil {
		return fail(errNoResponse{err})
	}
	var resp *http.Response
	for {
		var err error
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			if c.lr.N == 0 {
				err = fmt.Errorf("http: the response's headers are over %d bytes", maxHeaderBytes)
			}
			return fail(err)
		}
		// 1xx answers other than 101 come before the response itself.
		if resp.StatusCode < 100 || resp.StatusCode > 199 {
			break
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return fail(errors.New("http: unexpected 101 Switching Protocols"))
		}
	}
	c.lr.N = math.MaxInt64
	keep := !resp.Close && !req.Close
	if resp.Body == http.NoBody {
		// Nothing more to read: the connection is free now, whether or not the caller
		// reads the empty body.
		t.release(addr, c, stop() && keep)
		return resp, nil
	}
	resp.Body = &body{rc: resp.Body, c: c, t: t, addr: addr, ctx: ctx, stop: stop, keep: keep}
	return resp, nil
}

// write writes req on c through a write buffer lent for the call.
func (t *Transport) write(c *conn, req *http.Request) error {
	bw, _ := t.writers.Get().(*bufio.Writer)
	if bw == nil {
		bw = bufio.NewWriterSize(c, t.bufferSize())
	} else {
		bw.Reset(c)
	}
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil) // holds no connection while it waits in the pool
	t.writers.Put(bw)
	return err
}

func (t *Transport) bufferSize() int {
	if t.BufferSize <= 0 {
		return defaultBufferSize
	}
	return t.BufferSize
}

// body frees its connection when it has been read to the end, and closes it when the
// caller closes the body before that.
type body struct {
	rc   io.ReadCloser
	c    *conn
	t    *Transport
	addr string
	ctx  context.Context
	stop func() bool
	keep bool
	// done is set by whichever comes first: the end of the body, or Close (which may
	// run on another goroutine, to cut a read short).
	done atomic.Bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		if b.done.CompareAndSwap(false, true) {
			b.t.release(b.addr, b.c, b.stop() && b.keep)
		}
		return n, err
	}
	if err != nil && b.ctx.Err() != nil {
		err = context.Cause(b.ctx)
	}
	return n, err
}

func (b *body) Close() error {
	if b.done.CompareAndSwap(false, true) {
		b.stop()
		b.c.nc.Close()
	}
	return nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// retryable mirrors net/http: a call may be made again when nothing of it reached the
// server and its body can be sent again, or when it is idempotent and the server closed
// the connection before answering.
func retryable(req *http.Request, err error, written int64) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || req.Context().Err() != nil {
		return false
	}
	rewindable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	if written == 0 {
		return rewindable
	}
	var nr errNoResponse
	if !errors.As(err, &nr) || !rewindable {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// rewind is req with its body to be sent again.
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	b, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	r := *req
	r.Body = b
	return &r, nil
}

func (t *Transport) get(ctx context.Context, addr string) (*conn, error) {
	now := time.Now()
	for c := t.take(addr); c != nil; c = t.take(addr) {
		// A connection kept too long, or one the server closed or wrote to while it
		// was kept, is not used again.
		if now.Sub(c.idleAt) < t.idleTimeout() && c.br.Buffered() == 0 && open(c.nc) {
			c.reused = true
			return c, nil
		}
		c.nc.Close()
	}
	dial := t.DialContext
	if dial == nil {
		d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc}
	c.lr.R = nc
	c.br = bufio.NewReaderSize(&c.lr, t.bufferSize())
	return c, nil
}

// take is the connection to addr kept last, or nil.
func (t *Transport) take(addr string) *conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.idle[addr]
	if len(l) == 0 {
		return nil
	}
	c := l[len(l)-1]
	t.remove(addr, len(l)-1)
	return c
}

// release is the end of a call on c: c is kept for a later call when it may carry one.
func (t *Transport) release(addr string, c *conn, reusable bool) {
	if reusable {
		t.put(addr, c)
	} else {
		c.nc.Close()
	}
}

// put keeps c for a later call to addr, or closes it when enough are kept.
func (t *Transport) put(addr string, c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	maxPerHost, maxAll := t.MaxIdlePerHost, t.MaxIdle
	if maxPerHost <= 0 {
		maxPerHost = defaultMaxIdlePerHost
	}
	if maxAll <= 0 {
		maxAll = defaultMaxIdle
	}
	if len(t.idle[addr]) >= maxPerHost || t.nidle >= maxAll {
		c.nc.Close()
		return
	}
	if t.idle == nil {
		t.idle = map[string][]*conn{}
	}
	c.idleAt = time.Now()
	t.idle[addr] = append(t.idle[addr], c)
	t.nidle++
	if t.sweep == nil {
		t.sweep = time.AfterFunc(t.idleTimeout(), t.closeExpired)
	}
}

// remove takes the i-th kept connection to addr out of the pool; t.mu is held.
func (t *Transport) remove(addr string, i int) {
	l := t.idle[addr]
	copy(l[i:], l[i+1:])
	l[len(l)-1] = nil
	l = l[:len(l)-1]
	if len(l) == 0 {
		delete(t.idle, addr)
	} else {
		t.idle[addr] = l
	}
	t.nidle--
}

// closeExpired closes the connections kept longer than the idle timeout, and runs again
// while any are kept.
func (t *Transport) closeExpired() {
	limit := time.Now().Add(-t.idleTimeout())
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep = nil
	var next time.Time
	for addr, l := range t.idle {
		for len(l) > 0 && !l[0].idleAt.After(limit) {
			l[0].nc.Close()
			t.remove(addr, 0)
			l = t.idle[addr]
		}
		if len(l) > 0 && (next.IsZero() || l[0].idleAt.Before(next)) {
			next = l[0].idleAt
		}
	}
	if !next.IsZero() {
		t.sweep = time.AfterFunc(time.Until(next.Add(t.idleTimeout())), t.closeExpired)
	}
}

func (t *Transport) idleTimeout() time.Duration {
	if t.IdleTimeout > 0 {
		return t.IdleTimeout
	}
	return defaultIdleTimeout
}

// CloseIdleConnections closes the connections kept between calls, the fallback's too.
// http.Client.CloseIdleConnections calls it.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	for addr, l := range t.idle {
		for _, c := range l {
			c.nc.Close()
		}
		delete(t.idle, addr)
	}
	t.nidle = 0
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	if ci, ok := t.Fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}
