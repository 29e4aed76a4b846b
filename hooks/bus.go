// Package hooks is the typed event bus of the gateway: handlers register for events by
// name, with the source they come from, and each result-producing event has one reducer
// here that combines the handlers' results.
package hooks

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"
)

// Handler participates in an event. It returns the event's result type as a pointer
// (e.g. *ReceiveResult for message:receive) or nil for "no result".
//
// ctx is cancelled when the handler's timeout passes or the caller gives up. The bus
// stops waiting at that moment and continues without the handler; a handler that
// ignores ctx keeps its goroutine until it returns, so long work must watch ctx.
// The event a handler receives is its own shallow copy: changing it has no effect
// (return a result instead), and it stays valid after the handler timed out.
type Handler func(ctx context.Context, ev Event) (any, error)

// Observer sees every event, read-only, each streamed message_update included. It is
// called like a Handler (same timeout and ctx rules) and before the event's handlers.
type Observer func(ctx context.Context, ev Event)

// Options configure a Bus.
type Options struct {
	// Timeout bounds each handler call unless the handler has its own (default DefaultTimeout).
	Timeout time.Duration
	Logger  *slog.Logger
	// OnError is told of every handler that failed, panicked or timed out (for metrics).
	// It is called synchronously from the emitting goroutine and must be quick.
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
	id       uint64
	event    string // "" for observers
	observer bool   // sees every event; its result is ignored
	// wholeOnly: an observer that does not see streamed events (message_update), which
	// come once per delta of an answer. Hook programs registered for "*" are such.
	wholeOnly bool
	source    string
	handler   Handler
	timeout   time.Duration
	profile   string
}

// HandlerInfo describes one registration, for `gateway hooks list`.
type HandlerInfo struct {
	Source  string `json:"source"`
	Event   string `json:"event"` // "*" for observers
	Profile string `json:"profile,omitempty"`
}

// Bus is safe for concurrent use. Registration while events are being emitted is allowed:
// an emit works on the handler list as it was when the emit started. The methods that
// emit (Emit, Receive, Send, ...) are safe on a nil *Bus, which has no handlers.
type Bus struct {
	opts Options

	mu        sync.RWMutex
	nextID    uint64
	handlers  map[string][]*registration // lists are replaced, never mutated in place
	observers []*registration
}

// DefaultTimeout bounds a handler call when no timeout is given (hooks.timeout: 0).
const DefaultTimeout = 10 * time.Second

// NewBus returns an empty bus.
func NewBus(opts Options) *Bus {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Bus{opts: opts, handlers: make(map[string][]*registration)}
}

// On registers h for the named event on behalf of source and returns a func that removes it.
// Handlers of one event run in registration order.
func (b *Bus) On(event, source string, h Handler, opts ...HandlerOption) (unsubscribe func()) {
	r := &registration{event: event, source: source, handler: h}
	for _, o := range opts {
		o(r)
	}
	b.mu.Lock()
	b.nextID++
	r.id = b.nextID
	// A fresh slice, so emits that took the old one keep a stable list.
	list := b.handlers[event]
	b.handlers[event] = append(list[:len(list):len(list)], r)
	b.mu.Unlock()
	return func() { b.remove(r) }
}

// Observe registers o for every event and returns a func that removes it.
func (b *Bus) Observe(source string, o Observer, opts ...HandlerOption) (unsubscribe func()) {
	return b.observe(source, func(ctx context.Context, ev Event) (any, error) {
		o(ctx, ev)
		return nil, nil
	}, false, opts...)
}

// streamed reports whether an event comes once per streamed piece of an answer
// (message_update) rather than once per step. A hook program sees such events only when it
// lists them by name: observing "*" would start it once per delta.
func streamed(event string) bool { return event == NameMessageUpdate }

// observe registers an observer that can fail like a handler (hook programs do): its
// errors follow the error policy, its result is ignored. wholeOnly keeps streamed events
// from it.
func (b *Bus) observe(source string, h Handler, wholeOnly bool, opts ...HandlerOption) (unsubscribe func()) {
	r := &registration{source: source, observer: true, handler: h, wholeOnly: wholeOnly}
	for _, opt := range opts {
		opt(r)
	}
	b.mu.Lock()
	b.nextID++
	r.id = b.nextID
	b.observers = append(b.observers[:len(b.observers):len(b.observers)], r)
	b.mu.Unlock()
	return func() { b.remove(r) }
}

func (b *Bus) remove(r *registration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	without := func(list []*registration) []*registration {
		i := slices.Index(list, r)
		if i < 0 {
			return list // already removed: unsubscribe is idempotent
		}
		out := make([]*registration, 0, len(list)-1)
		return append(append(out, list[:i]...), list[i+1:]...)
	}
	if r.observer {
		b.observers = without(b.observers)
		return
	}
	list := without(b.handlers[r.event])
	if len(list) == 0 {
		delete(b.handlers, r.event)
		return
	}
	b.handlers[r.event] = list
}

// Handlers lists the current registrations in registration order.
func (b *Bus) Handlers() []HandlerInfo {
	b.mu.RLock()
	regs := slices.Clone(b.observers)
	for _, list := range b.handlers {
		regs = append(regs, list...)
	}
	b.mu.RUnlock()
	slices.SortFunc(regs, func(x, y *registration) int { return cmp.Compare(x.id, y.id) })
	out := make([]HandlerInfo, 0, len(regs))
	for _, r := range regs {
		ev := r.event
		if r.observer {
			ev = "*"
		}
		out = append(out, HandlerInfo{Source: r.source, Event: ev, Profile: r.profile})
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
	if r.wholeOnly && streamed(ev.EventName()) {
		return false
	}
	if r.profile == "" {
		return true
	}
	s, ok := ev.(interface{ SessionInfo() *Session })
	return ok && s.SessionInfo().Profile == r.profile
}

// clone gives a handler its own shallow copy of the event, so that the reducer can
// update the caller's event between handlers while a handler that outlived its timeout
// still reads the version it was given (no data race, no torn reads).
func clone(ev Event) Event {
	v := reflect.ValueOf(ev)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return ev
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	if e, ok := c.Interface().(Event); ok {
		return e
	}
	return ev
}

// call runs one handler under its timeout, turning errors, panics and timeouts into a
// logged, counted failure and a nil result: the pipeline continues as if it returned nothing.
// If the caller's ctx ends first, the handler is not blamed.
func (b *Bus) call(parent context.Context, r *registration, ev Event) any {
	timeout := r.timeout
	if timeout <= 0 {
		timeout = b.opts.Timeout
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel() // also tells a handler still running that nobody waits for it
	type outcome struct {
		res any
		err error
	}
	done := make(chan outcome, 1) // buffered: a late handler never blocks on send
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- outcome{err: fmt.Errorf("panic: %v", p)}
			}
		}()
		res, err := r.handler(ctx, ev)
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		if o.err != nil {
			if parent.Err() == nil {
				b.fail(parent, r, ev, o.err)
			}
			return nil
		}
		return o.res
	case <-ctx.Done():
		if parent.Err() == nil {
			b.fail(parent, r, ev, fmt.Errorf("timed out after %s", timeout))
		}
		return nil
	}
}

func (b *Bus) fail(ctx context.Context, r *registration, ev Event, err error) {
	b.opts.Logger.Warn("hook failed; continuing without it", "source", r.source, "event", ev.EventName(), "err", err)
	if b.opts.OnError != nil {
		b.opts.OnError(r.source, ev.EventName(), err)
	}
	if report, ok := ctx.Value(failureReportKey{}).(func(string, error)); ok {
		report(r.source, err)
	}
}

// declaredFailed counts a failed call of a hook's command or tool, and logs a tool's: the
// gateway logs a failed command with its chat, while a tool's error goes only to the model.
func (b *Bus) declaredFailed(source string, ev Event, err error) {
	if t, ok := ev.(*Tool); ok {
		b.opts.Logger.Warn("hook tool failed; the model was told", "source", source, "tool", t.Name, "session", t.SessionKey, "err", err)
	}
	if b.opts.OnError != nil {
		b.opts.OnError(source, ev.EventName(), err)
	}
}

type failureReportKey struct{}

// WithFailureReport returns a ctx under which every handler failure of an emit (error, panic,
// timeout, wrong result type) is also told to report, with the handler's source. OnError is
// global; this lets the emitter tie a failure to the chat its event belonged to. report is
// called from the emitting goroutine.
func WithFailureReport(ctx context.Context, report func(source string, err error)) context.Context {
	return context.WithValue(ctx, failureReportKey{}, report)
}

// fold is told each handler's non-nil result. It returns stop to end the chain, or an
// error when the result is not of the event's result type (counted as a failed handler).
type fold func(res any) (stop bool, err error)

// run calls the observers, then each handler in order, passing each result to f.
// Once ctx is done no further handler is called.
func (b *Bus) run(ctx context.Context, ev Event, f fold) {
	if b == nil {
		return
	}
	handlers, observers := b.snapshot(ev.EventName())
	if len(handlers) == 0 && len(observers) == 0 {
		return // the fast path: no allocation
	}
	for _, r := range observers {
		if ctx.Err() != nil {
			return
		}
		if r.sees(ev) {
			b.call(ctx, r, clone(ev))
		}
	}
	for _, r := range handlers {
		if ctx.Err() != nil {
			return
		}
		if !r.sees(ev) {
			continue
		}
		res := b.call(ctx, r, clone(ev))
		if f == nil || res == nil {
			continue
		}
		stop, err := f(res)
		if err != nil {
			b.fail(ctx, r, ev, err)
			continue
		}
		if stop {
			return
		}
	}
}

// Emit delivers an observation event: observers and handlers run, results are ignored.
func (b *Bus) Emit(ctx context.Context, ev Event) { b.run(ctx, ev, nil) }

// asResult checks a handler's result against the event's result type T. A nil pointer of
// any type means "no result"; another type is an error naming both.
func asResult[T any](res any) (*T, error) {
	if r, ok := res.(*T); ok {
		return r, nil
	}
	if v := reflect.ValueOf(res); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, nil
	}
	return nil, fmt.Errorf("handler returned %T, want %T", res, (*T)(nil))
}

// Has tells whether any handler or observer would see the named event, so that a caller
// can skip building an event nobody reads.
func (b *Bus) Has(event string) bool {
	h, o := b.snapshot(event)
	return len(h)+len(o) > 0
}
