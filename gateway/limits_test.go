package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"gateway/harness"
	"gateway/internal/llm"
)

// countingProvider records how many calls run at once.
type countingProvider struct {
	mu       sync.Mutex
	now, max int
	delay    time.Duration
}

func (p *countingProvider) Name() string { return "counting" }

func (p *countingProvider) Stream(ctx context.Context, req *harness.Request, onDelta func(string)) (*harness.Response, error) {
	p.mu.Lock()
	p.now++
	p.max = max(p.max, p.now)
	p.mu.Unlock()
	defer func() { p.mu.Lock(); p.now--; p.mu.Unlock() }()
	select {
	case <-time.After(p.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	onDelta("ok")
	return &harness.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "ok"}}, nil
}

func TestGlobalTurnLimitHolds(t *testing.T) {
	p := &countingProvider{delay: 100 * time.Millisecond}
	e := newEnv(t, func(c *Config, rt *Runtime, d *Deps) {
		c.MaxConcurrentTurns = 3
		d.NewProvider = func(harness.Config) (harness.Provider, error) { return p, nil }
	})
	const chats = 12
	for i := range chats {
		e.mem.inject(t, fmt.Sprint("lim", i), "1", "go")
	}
	e.mem.waitDone(t, chats)
	for i := range chats {
		if got := e.mem.finals(fmt.Sprint("lim", i)); len(got) != 1 || got[0] != "done:ok" {
			t.Fatalf("chat %d got %v", i, got)
		}
	}
	if p.max > 3 || p.max < 2 {
		t.Fatalf("at most %d model calls ran at once; want the limit 3 reached but never passed", p.max)
	}
}

func TestIdleSessionsAreEvictedAndResumeFromTheStore(t *testing.T) {
	e := newEnv(t, func(c *Config, rt *Runtime, d *Deps) { c.IdleEvict = 50 * time.Millisecond })
	e.mem.inject(t, "idle", "1", "remember the word zebra")
	e.mem.waitDone(t, 1)
	deadline := time.Now().Add(5 * time.Second)
	for gauge(e.metrics.ActiveSessions) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("active sessions = %v; want the idle chat evicted", gauge(e.metrics.ActiveSessions))
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.mem.inject(t, "idle", "2", "which word?")
	e.mem.waitDone(t, 1)
	reqs := e.fake.Requests()
	last := reqs[len(reqs)-1]
	found := false
	for _, m := range last.Messages {
		found = found || m.Content == "remember the word zebra"
	}
	if !found {
		t.Fatalf("after eviction the model saw %d messages without the earlier one", len(last.Messages))
	}
}

func gauge(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return -1
	}
	return m.GetGauge().GetValue()
}

func TestTooManyChatsTellsTheUser(t *testing.T) {
	block := make(chan struct{})
	e := newEnv(t, func(c *Config, rt *Runtime, d *Deps) { c.MaxSessions = 1 })
	e.fake.SetFunc(func(*harness.Request) harness.FakeReply {
		<-block
		return harness.FakeReply{Text: "done"}
	})
	e.mem.inject(t, "busy", "1", "hold the only slot")
	waitRequests(t, e.fake, 1)
	e.mem.inject(t, "other", "1", "hello?")
	e.mem.waitDone(t, 1)
	if got := e.mem.finals("other"); len(got) != 1 || !strings.Contains(got[0], "too many people") {
		t.Fatalf("second chat got %q; want a plain notice", got)
	}
	close(block)
	e.mem.waitDone(t, 1)
}
