// Package hooks is the typed event bus of the gateway: handlers register for events by
// name, with the source they come from, and each result-producing event has one reducer
// here that combines the handlers' results.
package hooks

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Handler participates in an event. It returns the event's result type as a pointer
// (e.g. *ReceiveResult for message:receive) or nil for "no result".
type Handler func(ctx context.Context, ev Event) (any, error)

// Observer sees every event, read-only.
type Observer func(ctx context.Context, ev Event)

// Options configure a Bus.
type Options struct {
	// Timeout bounds each handler call unless the handler has its own (default 10s).
	Timeout time.Duration
	Logger  *slog.Logger
	// OnError is told of every handler that failed, panicked or timed out (for metrics).
	OnError func(source, event string, err error)
}

// HandlerOption adjusts one registration.
type HandlerOption func(*registration)

// WithTimeout gives one handler its own timeout.
func WithTimeout(d time.Duration) HandlerOption {
	return func(r *registration) { r.timeout = d }
}

// ForProfile makes a handler see only events of sessions bound to the named profile
// (events that carry no session are not seen either).
func ForProfile(name string) HandlerOption {
	return func(r *registration) { r.profile = name }
}

type registration struct {
	id      uint64
	event   string // "" for observers
	source  string
	handler Handler
	observe Observer
	timeout time.Duration
	profile string
}

// HandlerInfo describes one registration, for `gateway hooks list`.
type HandlerInfo struct {
	Source  string `json:"source"`
	Event   string `json:"event"` // "*" for observers
	Profile string `json:"profile,omitempty"`
}

// Bus is safe for concurrent use. Registration while events are being emitted is allowed:
// an emit works on the handler list as it was when the emit started.
type Bus struct {
	opts Options

	mu        sync.RWMutex
	nextID    uint64
	handlers  map[string][]*registration
	observers []*registration
}

// NewBus returns an empty bus.
func NewBus(opts Options) *Bus {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Bus{opts: opts, handlers: make(map[string][]*registration)}
}

// On registers h for the named event on behalf of source and returns a func that removes it.
func (b *Bus) On(event, source string, h Handler, opts ...HandlerOption) (unsubscribe func()) {
	r := &registration{event: event, source: source, handler: h}
	for _, o := range opts {
		o(r)
	}
	b.mu.Lock()
	b.nextID++
	r.id = b.nextID
	b.handlers[event] = append(b.handlers[event], r)
	b.mu.Unlock()
	return func() { b.remove(r) }
}

// Observe registers o for every event and returns a func that removes it.
func (b *Bus) Observe(source string, o Observer, opts ...HandlerOption) (unsubscribe func()) {
	r := &registration{source: source, observe: o}
	for _, opt := range opts {
		opt(r)
	}
	b.mu.Lock()
	b.nextID++
	r.id = b.nextID
	b.observers = append(b.observers, r)
	b.mu.Unlock()
	return func() { b.remove(r) }
}

func (b *Bus) remove(r *registration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	del := func(list []*registration) []*registration {
		out := make([]*registration, 0, len(list))
		for _, x := range list {
			if x != r {
				out = append(out, x)
			}
		}
		return out
	}
	if r.event == "" {
		b.observers = del(b.observers)
		return
	}
	b.handlers[r.event] = del(b.handlers[r.event])
	if len(b.handlers[r.event]) == 0 {
		delete(b.handlers, r.event)
	}
}

// Handlers lists the current registrations in registration order per event.
func (b *Bus) Handlers() []HandlerInfo {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []HandlerInfo
	for _, r := range b.observers {
		out = append(out, HandlerInfo{Source: r.source, Event: "*", Profile: r.profile})
	}
	for _, list := range b.handlers {
		for _, r := range list {
			out = append(out, HandlerInfo{Source: r.source, Event: r.event, Profile: r.profile})
		}
	}
	return out
}

// snapshot returns the handlers for an event; lists are replaced, never mutated, on change.
func (b *Bus) snapshot(event string) (handlers, observers []*registration) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.handlers[event], b.observers
}

func (r *registration) sees(ev Event) bool {
	if r.profile == "" {
		return true
	}
	s, ok := ev.(interface{ SessionInfo() *Session })
	return ok && s.SessionInfo().Profile == r.profile
}

// call runs one handler under its timeout, turning errors, panics and timeouts into a
// logged, counted failure and a nil result: the pipeline continues as if it returned nothing.
func (b *Bus) call(ctx context.Context, r *registration, ev Event) any {
	timeout := r.timeout
	if timeout <= 0 {
		timeout = b.opts.Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type outcome struct {
		res any
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- outcome{err: fmt.Errorf("panic: %v", p)}
			}
		}()
		if r.observe != nil {
			r.observe(ctx, ev)
			done <- outcome{}
			return
		}
		res, err := r.handler(ctx, ev)
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		if o.err != nil {
			b.fail(r, ev, o.err)
			return nil
		}
		return o.res
	case <-ctx.Done():
		b.fail(r, ev, fmt.Errorf("timed out after %s: %w", timeout, ctx.Err()))
		return nil
	}
}

func (b *Bus) fail(r *registration, ev Event, err error) {
	b.opts.Logger.Warn("hook failed; continuing without it", "source", r.source, "event", ev.EventName(), "err", err)
	if b.opts.OnError != nil {
		b.opts.OnError(r.source, ev.EventName(), err)
	}
}

// run calls the observers, then each handler in order, passing each result to fold.
// fold returns false to stop the chain.
func (b *Bus) run(ctx context.Context, ev Event, fold func(res any) bool) {
	handlers, observers := b.snapshot(ev.EventName())
	for _, r := range observers {
		if r.sees(ev) {
			b.call(ctx, r, ev)
		}
	}
	for _, r := range handlers {
		if !r.sees(ev) {
			continue
		}
		res := b.call(ctx, r, ev)
		if fold != nil && res != nil && !fold(res) {
			return
		}
	}
}

// Emit delivers an observation event: observers and handlers run, results are ignored.
func (b *Bus) Emit(ctx context.Context, ev Event) { b.run(ctx, ev, nil) }
