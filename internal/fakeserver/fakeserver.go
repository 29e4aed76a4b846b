// Package fakeserver is the small core the test fakes (telegramtest, slacktest,
// discordtest, openaitest, anthropictest, voicetest) share: an HTTP server on 127.0.0.1
// whose goroutines end at Close, a record of the calls it received, and one failure
// script. Each fake keeps its platform's wire form: it asks the script whether a call
// fails and renders the Failure the way its platform answers (Telegram's ok:false body,
// Slack's Retry-After header, Discord's retry_after JSON, OpenAI's error object).
//
// It is test code: nothing in the gateway binary imports it.
package fakeserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"time"
)

// Server is an httptest server on 127.0.0.1 with a context that ends at Close and a
// group for the goroutines the fake starts.
type Server struct {
	URL string // http://127.0.0.1:port, no trailing slash

	srv     *httptest.Server
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
	mu      sync.Mutex
	closing bool
	onClose []func()
}

// New starts h on 127.0.0.1. The caller closes it (fakes do so at their test's cleanup).
func New(h http.Handler) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{ctx: ctx, cancel: cancel, srv: httptest.NewServer(h)}
	s.URL = s.srv.URL
	return s
}

// Context ends when Close begins.
func (s *Server) Context() context.Context { return s.ctx }

// Go runs f in a goroutine that Close waits for; f should return when ctx ends. Once
// Close has begun it runs nothing and reports false.
func (s *Server) Go(f func(ctx context.Context)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f(s.ctx)
	}()
	return true
}

// OnClose registers f to run at Close after the context ends and before the server
// stops, for connections the HTTP server no longer tracks (hijacked WebSockets).
func (s *Server) OnClose(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onClose = append(s.onClose, f)
}

// Close ends the context, runs the OnClose funcs, drops client connections, stops the
// server and waits for the goroutines started with Go. It may be called more than once.
func (s *Server) Close() {
	s.once.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.cancel()
		fs := slices.Clone(s.onClose)
		s.mu.Unlock()
		for _, f := range fs {
			f()
		}
		s.srv.CloseClientConnections()
		s.srv.Close()
		s.wg.Wait()
	})
}

// Wait waits d, and reports false instead when the request or the server ends first.
func (s *Server) Wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
	case <-s.ctx.Done():
	}
	return false
}

// Log is a record of calls, safe for concurrent use. T is the fake's own Call type.
type Log[T any] struct {
	mu    sync.Mutex
	calls []T
}

// Add records c.
func (l *Log[T]) Add(c T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
}

// All lists the calls, oldest first.
func (l *Log[T]) All() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// Filter lists the calls keep accepts, oldest first.
func (l *Log[T]) Filter(keep func(T) bool) []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []T
	for _, c := range l.calls {
		if keep(c) {
			out = append(out, c)
		}
	}
	return out
}

// Reset forgets the calls recorded so far.
func (l *Log[T]) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = nil
}

// Len is how many calls were recorded.
func (l *Log[T]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// Failure is one scripted failed call. A fake renders it in its platform's wire form.
type Failure struct {
	// Status is the HTTP status (or, for Telegram, the error_code). 0 means 429 when
	// RetryAfter is set, else 500.
	Status int
	// RetryAfter is the wait the answer asks for; 0 for none. Platforms that send whole
	// seconds round it up.
	RetryAfter time.Duration
	// Method is the call that fails, in the fake's terms ("sendMessage", "chat.update",
	// "typing", "transcriptions"); "" is any of the calls the fake documents as its
	// default (the ones that send a message).
	Method string
	// Chat, when set, limits the failure to calls addressed to this chat or channel, in
	// fakes that know chats (a per-chat rate limit); "" is any chat.
	Chat string
	// Message is the error text; "" lets the fake choose its platform's usual text.
	Message string
}

// Code is the status to answer: Status, or its default.
func (f Failure) Code() int {
	switch {
	case f.Status != 0:
		return f.Status
	case f.RetryAfter > 0:
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// Seconds is RetryAfter rounded up to whole seconds, as most platforms send it.
func (f Failure) Seconds() int {
	return int((f.RetryAfter + time.Second - 1) / time.Second)
}

// Failures is a failure script, safe for concurrent use: scripted failures are taken
// oldest first, each by the first call it applies to.
type Failures struct {
	mu sync.Mutex
	q  []Failure
}

// Add scripts the next n calls that f applies to to fail with f.
func (s *Failures) Add(n int, f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.q = append(s.q, f)
	}
}

// Take removes and returns the oldest failure that applies to a call of method to chat
// ("" when the call has no chat). isDefault reports whether method is among the calls a
// Failure with Method "" applies to; nil means every call.
func (s *Failures) Take(method, chat string, isDefault func(method string) bool) (Failure, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.q {
		if f.Method == "" && isDefault != nil && !isDefault(method) || f.Method != "" && f.Method != method {
			continue
		}
		if f.Chat != "" && f.Chat != chat {
			continue
		}
		s.q = slices.Delete(s.q, i, i+1)
		return f, true
	}
	return Failure{}, false
}

// Clear drops every failure still scripted: the platform is well again.
func (s *Failures) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.q = nil
}

// Len is how many failures are still scripted.
func (s *Failures) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.q)
}

// Text is the error text to answer: Message, or the status's usual text.
func (f Failure) Text() string {
	if f.Message != "" {
		return f.Message
	}
	return http.StatusText(f.Code())
}

// Script is a fake model's script of replies R to requests Q, safe for concurrent use:
// pushed replies answer first, in order (Pop), then the func set with SetFunc (Func).
type Script[Q, R any] struct {
	mu      sync.Mutex
	replies []R
	fn      func(Q) R
}

// Push appends replies to the script.
func (s *Script[Q, R]) Push(r ...R) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = append(s.replies, r...)
}

// SetFunc sets the func that answers when no pushed reply is left.
func (s *Script[Q, R]) SetFunc(fn func(Q) R) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fn = fn
}

// Pop takes the oldest pushed reply; false when none is left.
func (s *Script[Q, R]) Pop() (R, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.replies) == 0 {
		var zero R
		return zero, false
	}
	r := s.replies[0]
	s.replies = s.replies[1:]
	return r, true
}

// Func is the func set with SetFunc (nil when none). A fake calls it without holding its
// own locks: it may call back into the fake.
func (s *Script[Q, R]) Func() func(Q) R {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fn
}
