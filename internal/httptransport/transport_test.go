package httptransport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Every goroutine a test starts must have ended when the package's tests are done.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// connCounter counts the connections a test server accepted and closed.
type connCounter struct{ opened, closed atomic.Int32 }

func (c *connCounter) track(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		c.opened.Add(1)
	case http.StateClosed, http.StateHijacked:
		c.closed.Add(1)
	}
}

func newServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *connCounter) {
	t.Helper()
	cc := &connCounter{}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = cc.track
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, cc
}

func newClient(t *testing.T, tr *Transport) *http.Client {
	t.Helper()
	if tr.Fallback == nil {
		tr.Fallback = http.DefaultTransport.(*http.Transport).Clone()
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// text reads a response whole: text(t)(c.Get(u)).
func text(t *testing.T) func(*http.Response, error) string {
	return func(resp *http.Response, err error) string {
		t.Helper()
		return readAll(t, resp, err)
	}
}

func readAll(t *testing.T, resp *http.Response, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCallsInTurnShareOneConnection(t *testing.T) {
	srv, cc := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/chunked":
			// Flushed in pieces: the answer is sent with chunked encoding, as a stream is.
			for _, part := range strings.Fields(string(b)) {
				fmt.Fprintf(w, "%s;", part)
				w.(http.Flusher).Flush()
			}
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		default:
			fmt.Fprintf(w, "%s %s", r.Method, b)
		}
	})
	c := newClient(t, &Transport{BufferSize: 64})
	for i := range 10 {
		body := fmt.Sprintf("call %d %s", i, strings.Repeat("x", 200)) // past the 64-byte buffers
		if got := text(t)(c.Post(srv.URL+"/echo", "text/plain", strings.NewReader(body))); got != "POST "+body {
			t.Fatalf("call %d: got %q", i, got)
		}
		if got := text(t)(c.Post(srv.URL+"/chunked", "text/plain", strings.NewReader("a b c"))); got != "a;b;c;" {
			t.Fatalf("chunked call %d: got %q", i, got)
		}
		// An empty answer frees the connection even when its body is only closed.
		resp, err := c.Get(srv.URL + "/empty")
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("empty call %d: %v %v", i, resp, err)
		}
		resp.Body.Close()
		// A request body of unknown length goes out chunked.
		pr, pw := io.Pipe()
		go func() { pw.Write([]byte("streamed")); pw.Close() }()
		if got := text(t)(c.Post(srv.URL+"/echo", "text/plain", pr)); got != "POST streamed" {
			t.Fatalf("streamed call %d: got %q", i, got)
		}
	}
	if n := cc.opened.Load(); n != 1 {
		t.Fatalf("40 calls one after another opened %d connections, want 1", n)
	}
}

func TestConcurrentCallsAndTheIdleLimit(t *testing.T) {
	const calls = 8
	var arrived sync.WaitGroup
	arrived.Add(calls)
	srv, cc := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		arrived.Wait() // every call is in flight at once
		io.WriteString(w, r.URL.Query().Get("n"))
	})
	c := newClient(t, &Transport{MaxIdlePerHost: 3})
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Go(func() {
			resp, err := c.Get(fmt.Sprintf("%s/?n=%d", srv.URL, i))
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && string(b) != fmt.Sprint(i) {
				err = fmt.Errorf("call %d got %q", i, b)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := cc.opened.Load(); n != calls {
		t.Fatalf("%d calls at once opened %d connections", calls, n)
	}
	// Three are kept for later calls; the server sees the other five closed.
	waitFor(t, "5 connections closed", func() bool { return cc.closed.Load() == calls-3 })
	arrived.Add(1)
	text(t)(c.Get(srv.URL + "/?n=0"))
	if n := cc.opened.Load(); n != calls {
		t.Fatalf("a call after the burst dialed again: %d connections", n)
	}
}

func TestCancelledCallsEndWithTheContextsError(t *testing.T) {
	release := make(chan struct{})
	srv, cc := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // so that the server notices the client hang up
		if r.URL.Path == "/stream" {
			io.WriteString(w, "first")
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	c := newClient(t, &Transport{})

	// Cancelled while waiting for the response's head.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/wait", strings.NewReader("q"))
	if _, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call past its deadline: %v, want context.DeadlineExceeded", err)
	}

	// Cancelled in the middle of the body, with the cause a canceller gave.
	ctx2, cancel2 := context.WithCancelCause(context.Background())
	req, _ = http.NewRequestWithContext(ctx2, http.MethodGet, srv.URL+"/stream", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first" {
		t.Fatalf("first chunk: %q %v", buf, err)
	}
	stopped := errors.New("the user pressed stop")
	time.AfterFunc(50*time.Millisecond, func() { cancel2(stopped) })
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, stopped) {
		t.Fatalf("reading a cancelled stream: %v, want the cancel's cause", err)
	}
	resp.Body.Close()
	// Neither connection is used again: the server sees both closed.
	waitFor(t, "both connections closed", func() bool { return cc.closed.Load() == 2 })
}

func TestABodyClosedEarlyClosesItsConnection(t *testing.T) {
	srv, cc := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("y", 64<<10))
	})
	c := newClient(t, &Transport{})
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(make([]byte, 10))
	resp.Body.Close()
	if got := text(t)(c.Get(srv.URL)); len(got) != 64<<10 {
		t.Fatalf("the next call read %d bytes", len(got))
	}
	if n := cc.opened.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: one closed early, one new", n)
	}
}

func TestAConnectionTheServerClosedIsNotUsed(t *testing.T) {
	var posts atomic.Int32
	srv, cc := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		io.WriteString(w, "ok")
	})
	c := newClient(t, &Transport{})
	text(t)(c.Post(srv.URL, "text/plain", strings.NewReader("1")))
	srv.CloseClientConnections() // as a server's keep-alive timeout does
	waitFor(t, "the server to close the connection", func() bool { return cc.closed.Load() == 1 })
	if got := text(t)(c.Post(srv.URL, "text/plain", strings.NewReader("2"))); got != "ok" {
		t.Fatalf("got %q", got)
	}
	if n, p := cc.opened.Load(), posts.Load(); n != 2 || p != 2 {
		t.Fatalf("%d connections, %d posts; want 2 and 2", n, p)
	}
}

// rawServer answers the first request on its first connection, then reads the next
// request on it and hangs up without answering, as a server does whose keep-alive timer
// fires while the request is on its way. Later connections are answered.
func rawServer(t *testing.T) (addr string, seen func(path string) int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	counts := map[string]int{}
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for i := 0; ; i++ {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					mu.Lock()
					counts[req.URL.Path]++
					mu.Unlock()
					if i == 0 && n == 1 {
						return
					}
					io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
		}
	})
	return ln.Addr().String(), func(path string) int {
		mu.Lock()
		defer mu.Unlock()
		return counts[path]
	}
}

// warmedUp is a client whose one kept connection to a rawServer will hang up on the next
// request.
func warmedUp(t *testing.T) (addr string, c *http.Client, seen func(path string) int) {
	t.Helper()
	addr, seen = rawServer(t)
	c = newClient(t, &Transport{})
	text(t)(c.Get("http://" + addr + "/warm"))
	return addr, c, seen
}

func TestAHangUpIsRetriedOnlyWhenTheCallCanBeMadeTwice(t *testing.T) {
	t.Run("GET is made again", func(t *testing.T) {
		addr, c, seen := warmedUp(t)
		if got := text(t)(c.Get("http://" + addr + "/x")); got != "ok" {
			t.Fatalf("got %q", got)
		}
		if n := seen("/x"); n != 2 {
			t.Fatalf("the server saw the GET %d times, want 2 (the hang-up, then the retry)", n)
		}
	})
	t.Run("POST is not: the server may have acted on it", func(t *testing.T) {
		addr, c, seen := warmedUp(t)
		_, err := c.Post("http://"+addr+"/x", "text/plain", strings.NewReader("send once"))
		if err == nil || !strings.Contains(err.Error(), "connection closed before the response") {
			t.Fatalf("POST: %v, want the hang-up", err)
		}
		if n := seen("/x"); n != 1 {
			t.Fatalf("the server saw the POST %d times, want 1", n)
		}
	})
	t.Run("a POST with an idempotency key is", func(t *testing.T) {
		addr, c, seen := warmedUp(t)
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/x", strings.NewReader("k"))
		req.Header.Set("Idempotency-Key", "k1")
		if got := text(t)(c.Do(req)); got != "ok" {
			t.Fatalf("got %q", got)
		}
		if n := seen("/x"); n != 2 {
			t.Fatalf("the server saw it %d times, want 2", n)
		}
	})
}

func TestOversizedHeadersAreRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		http.ReadRequest(bufio.NewReader(nc))
		io.WriteString(nc, "HTTP/1.1 200 OK\r\n")
		line := "X-Filler: " + strings.Repeat("z", 1000) + "\r\n"
		for range (maxHeaderBytes / len(line)) + 10 {
			if _, err := io.WriteString(nc, line); err != nil {
				return
			}
		}
	}()
	c := newClient(t, &Transport{})
	_, err = c.Get("http://" + ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "headers are over") {
		t.Fatalf("got %v, want the headers refused", err)
	}
}

func TestIdleConnectionsCloseAfterTheTimeout(t *testing.T) {
	srv, cc := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	c := newClient(t, &Transport{IdleTimeout: 50 * time.Millisecond})
	text(t)(c.Get(srv.URL))
	waitFor(t, "the kept connection to close", func() bool { return cc.closed.Load() == 1 })
	text(t)(c.Get(srv.URL))
	if n := cc.opened.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// recorder is a fallback that records what it was given.
type recorder struct{ got []string }

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.got = append(r.got, req.URL.String())
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

func TestWhatItDoesNotMakeGoesToTheFallback(t *testing.T) {
	srv, cc := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "direct") })
	fb := &recorder{}
	proxied := "http://proxied.example/"
	c := newClient(t, &Transport{Fallback: fb, Proxy: func(r *http.Request) (*url.URL, error) {
		if r.URL.String() == proxied {
			return url.Parse("http://127.0.0.1:1")
		}
		return nil, nil
	}})
	for _, u := range []string{"https://api.example/x", proxied} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ws", nil)
	req.Header.Set("Upgrade", "websocket")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := text(t)(c.Get(srv.URL)); got != "direct" {
		t.Fatalf("got %q", got)
	}
	want := []string{"https://api.example/x", proxied, srv.URL + "/ws"}
	if fmt.Sprint(fb.got) != fmt.Sprint(want) {
		t.Fatalf("fallback got %v, want %v", fb.got, want)
	}
	if n := cc.opened.Load(); n != 1 {
		t.Fatalf("the direct call opened %d connections", n)
	}
}

// A call waiting for its answer holds its caller's goroutine and nothing more: with
// net/http's Transport each open connection also holds a read and a write goroutine.
func TestAWaitingCallHoldsOnlyItsCaller(t *testing.T) {
	const calls = 20
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := newClient(t, &Transport{})
	var callers sync.WaitGroup
	for range calls {
		callers.Go(func() {
			resp, err := c.Post("http://"+ln.Addr().String(), "text/plain", strings.NewReader("wait"))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	var conns []net.Conn
	for range calls {
		nc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		http.ReadRequest(bufio.NewReader(nc))
		conns = append(conns, nc)
	}
	// Every request has arrived; each caller waits for its answer. Goroutines that
	// run HTTP code for them, other than the callers themselves:
	buf := make([]byte, 1<<20)
	var helpers, waiting int
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		switch {
		case strings.Contains(g, "TestAWaitingCallHoldsOnlyItsCaller.func"):
			waiting++
		case strings.Contains(g, "net/http.") || strings.Contains(g, "httptransport.(*"):
			helpers++
		}
	}
	if waiting != calls || helpers != 0 {
		t.Errorf("%d calls waiting for their answers: %d callers, %d other goroutines; want %d and 0", calls, waiting, helpers, calls)
	}
	for _, nc := range conns {
		io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		nc.Close()
	}
	callers.Wait()
}
