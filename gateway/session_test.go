package gateway

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"gateway/harness"
	"gateway/internal/llm"
)

// gatedProvider holds every call until open is closed, and records how many messages each
// call carried.
type gatedProvider struct {
	open    chan struct{}
	mu      sync.Mutex
	waiting int
	seen    []int
}

func (p *gatedProvider) Name() string { return "gated" }

func (p *gatedProvider) Stream(ctx context.Context, req *harness.Request, onDelta func(string)) (*harness.Response, error) {
	p.mu.Lock()
	p.waiting++
	p.seen = append(p.seen, len(req.Messages))
	p.mu.Unlock()
	defer func() { p.mu.Lock(); p.waiting--; p.mu.Unlock() }()
	select {
	case <-p.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	onDelta("ok")
	return &harness.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "ok"}}, nil
}

func (p *gatedProvider) inFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting
}

// A chat holds a goroutine of its own only while it has work for it: a chat whose turn
// waits on the model holds the turn's goroutine alone, and one that was answered holds
// none, yet keeps its conversation until sessions.idle_evict. A goroutine per known chat
// would hold a stack for each (a busy bot knows thousands of chats; docs/bench.md, seventh
// pass).
func TestWaitingAndIdleChatsHoldNoActor(t *testing.T) {
	p := &gatedProvider{open: make(chan struct{})}
	e := newEnv(t, func(c *Config, rt *Runtime, d *Deps) {
		d.NewProvider = func(harness.Config) (harness.Provider, error) { return p, nil }
	})
	const chats = 40
	settled := func() int { // goroutines once the count stopped moving
		n := runtime.NumGoroutine()
		for range 50 {
			time.Sleep(20 * time.Millisecond)
			m := runtime.NumGoroutine()
			if m == n {
				return n
			}
			n = m
		}
		return n
	}
	base := settled()
	for i := range chats {
		e.mem.inject(t, fmt.Sprint("park", i), "1", "first")
	}
	for deadline := time.Now().Add(30 * time.Second); p.inFlight() < chats; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d turns reached the model", p.inFlight(), chats)
		}
	}
	waiting := settled() - base
	t.Logf("%d goroutines for %d chats waiting on the model", waiting, chats)
	if waiting > chats+chats/4 {
		t.Errorf("%d goroutines for %d chats waiting on the model; want about one each (the turn's)", waiting, chats)
	}

	close(p.open)
	e.mem.waitDone(t, chats)
	var idle int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if idle = runtime.NumGoroutine() - base; idle <= chats/4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines for %d answered chats; want none held by them", idle, chats)
		}
	}
	if got := gauge(e.metrics.ActiveSessions); got != chats {
		t.Fatalf("active sessions = %v; want the %d answered chats kept until idle_evict", got, chats)
	}

	// Parked chats answer the next message with their conversation so far.
	for i := range chats {
		e.mem.inject(t, fmt.Sprint("park", i), "2", "second")
	}
	e.mem.waitDone(t, chats)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.seen[chats:] {
		if n < 3 {
			t.Fatalf("a second turn carried %d messages; want the first exchange and the new one", n)
		}
	}
}
