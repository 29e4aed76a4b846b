package hooks

import (
	"context"
	"sync"
)

// Scope registers handlers on behalf of one source and removes them all together, running
// the source's cleanups, on Close (a reload or unload of that source).
type Scope struct {
	bus    *Bus
	source string

	mu       sync.Mutex
	unsubs   []func()
	cleanups []func()
	closed   bool
}

// Scope returns a new scope for source ("builtin:stt", "dir:/etc/gw/hooks/x", ...).
func (b *Bus) Scope(source string) *Scope { return &Scope{bus: b, source: source} }

// Source names the scope's source.
func (s *Scope) Source() string { return s.source }

// On registers h for event within the scope.
func (s *Scope) On(event string, h Handler, opts ...HandlerOption) func() {
	return s.track(s.bus.On(event, s.source, h, opts...))
}

// Observe registers o within the scope.
func (s *Scope) Observe(o Observer, opts ...HandlerOption) func() {
	return s.track(s.bus.Observe(s.source, o, opts...))
}

// observe registers a hook program's "*" observer within the scope: it can fail like a
// handler (see Bus.observe) and does not see streamed events (see streamed), so a program
// is never started once per delta of an answer.
func (s *Scope) observe(h Handler, opts ...HandlerOption) func() {
	return s.track(s.bus.observe(s.source, h, true, opts...))
}

func (s *Scope) track(unsub func()) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		unsub()
		return func() {}
	}
	s.unsubs = append(s.unsubs, unsub)
	return unsub
}

// Defer adds a cleanup that Close runs (in reverse order of adding). On a scope that is
// already closed the cleanup runs at once, so nothing is left behind.
func (s *Scope) Defer(cleanup func()) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cleanup()
		return
	}
	s.cleanups = append(s.cleanups, cleanup)
	s.mu.Unlock()
}

// Close removes every handler of the scope, then runs its cleanups. It is idempotent.
// Handlers already running finish on their own (their ctx rules are the bus's).
func (s *Scope) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	unsubs, cleanups := s.unsubs, s.cleanups
	s.mu.Unlock()
	for _, u := range unsubs {
		u()
	}
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
}

// Handle registers a typed handler within a scope: fn receives the concrete event type
// and returns its result type (a pointer, or nil for "no result").
func Handle[E Event, R any](s *Scope, fn func(ctx context.Context, ev E) (R, error), opts ...HandlerOption) func() {
	var zero E
	return s.On(zero.EventName(), func(ctx context.Context, ev Event) (any, error) {
		e, ok := ev.(E)
		if !ok {
			return nil, nil
		}
		return fn(ctx, e)
	}, opts...)
}
