package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/channels"
	"gateway/harness"
	"gateway/hooks"
	"gateway/profiles"
)

// gateChannel is a platform whose sends wait until the test opens the gate (a chat under
// a long 429, a platform that hangs), and that records every frame once through.
type gateChannel struct {
	sink   channels.Sink
	gate   chan struct{}
	opened chan struct{} // one per Open
	mu     sync.Mutex
	frames map[string][]channels.Frame
	done   chan string
}

func newGateChannel() *gateChannel {
	return &gateChannel{gate: make(chan struct{}), opened: make(chan struct{}, 100), frames: map[string][]channels.Frame{}, done: make(chan string, 100)}
}

func (c *gateChannel) Name() string { return "gate" }
func (c *gateChannel) Start(ctx context.Context, sink channels.Sink) error {
	c.sink = sink
	sink.Connected("gate", true, nil)
	return nil
}
func (c *gateChannel) Stop(context.Context) error { return nil }
func (c *gateChannel) Open(ctx context.Context, t channels.Target) (channels.Stream, error) {
	c.opened <- struct{}{}
	select {
	case <-c.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return gateStream{c: c, chat: t.ChatID}, nil
}

type gateStream struct {
	c    *gateChannel
	chat string
}

func (s gateStream) Send(ctx context.Context, f channels.Frame) error {
	s.c.mu.Lock()
	s.c.frames[s.chat] = append(s.c.frames[s.chat], f)
	s.c.mu.Unlock()
	if f.Type == channels.FrameDone || f.Type == channels.FrameError {
		s.c.done <- s.chat
	}
	return nil
}

func (c *gateChannel) deliver(t *testing.T, chat, id string) time.Duration {
	t.Helper()
	start := time.Now()
	err := c.sink.Deliver(context.Background(), &channels.Message{ID: id, Channel: "gate", ChatID: chat, UserID: "u" + chat,
		ChatType: channels.ChatDM, Parts: []channels.Part{channels.TextPart("message " + id)}})
	if err != nil {
		t.Fatalf("deliver %s: %v", id, err)
	}
	return time.Since(start)
}

func (c *gateChannel) finals(chat string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, f := range c.frames[chat] {
		if f.Type == channels.FrameDone || f.Type == channels.FrameError {
			out = append(out, f.Text)
		}
	}
	return out
}

// A refused message's notice is sent by the gateway's own workers: the adapter's intake
// goroutine (Deliver) never waits for the platform, even when its send hangs.
func TestRefusedMessageDoesNotHoldUpDeliver(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    func(*Config)
		chats  []string // the first one's message holds the chat busy in its receive hook
		notice string
	}{
		{"queue full", func(c *Config) { c.QueueSize = 1 }, []string{"a", "a", "a", "a"}, "earlier messages"},
		{"too many chats", func(c *Config) { c.MaxSessions = 1 }, []string{"a", "b", "c"}, "too many people"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gc := newGateChannel()
			entered, block := make(chan struct{}, 10), make(chan struct{})
			e := newEnvWith(t, t.TempDir(), []channels.Channel{gc}, func(c *Config, rt *Runtime, d *Deps) { tc.cfg(c) })
			t.Cleanup(func() { close(block); close(gc.gate) }) // before the env's Stop
			hooks.Handle(e.bus.Scope("test:block"), func(ctx context.Context, ev *hooks.MessageReceive) (*hooks.ReceiveResult, error) {
				if ev.Channel == "gate" && ev.ChatID == "a" {
					entered <- struct{}{}
					select {
					case <-block:
					case <-ctx.Done():
					}
				}
				return nil, nil
			}, hooks.WithTimeout(time.Minute))

			gc.deliver(t, tc.chats[0], "1")
			select {
			case <-entered:
			case <-time.After(30 * time.Second):
				t.Fatal("the receive hook was never called")
			}
			for i, chat := range tc.chats[1:] {
				if took := gc.deliver(t, chat, fmt.Sprint(i+2)); took > time.Second {
					t.Fatalf("Deliver of message %d took %s: it waited for the platform", i+2, took)
				}
			}
			select { // the notice is on its way, on a goroutine of the gateway
			case <-gc.opened:
			case <-time.After(30 * time.Second):
				t.Fatal("the notice was never sent")
			}
		})
	}
}

// A slow channel:connect hook holds up neither the adapter that reports the connection nor
// the messages of any chat.
func TestSlowConnectHookHoldsUpNeitherAdapterNorChats(t *testing.T) {
	e := newEnv(t)
	entered, release := make(chan struct{}, 10), make(chan struct{})
	t.Cleanup(func() { close(release) })
	e.bus.On(hooks.NameChannelConnect, "test:slow-connect", func(ctx context.Context, ev hooks.Event) (any, error) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	}, hooks.WithTimeout(time.Minute))

	returned := make(chan struct{})
	go func() {
		defer close(returned)
		e.mem.sink.Connected("mem", false, errors.New("connection reset"))
		e.mem.sink.Connected("mem", true, nil) // the reconnect loop reports it is back
	}()
	select {
	case <-returned:
	case <-time.After(2 * time.Second):
		t.Fatal("Connected waited for the channel:connect hook")
	}
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("channel:connect was never emitted")
	}
	e.fake.Push(harness.FakeReply{Text: "answered"})
	e.mem.inject(t, "other", "1", "hello")
	e.mem.waitDone(t, 1) // while the hook still runs
	if got := e.mem.finals("other"); len(got) != 1 || got[0] != "done:answered" {
		t.Fatalf("got %q", got)
	}
}

// A message is taken with one runtime and its turn runs with it, even when a reload
// replaced the runtime while the message waited behind the chat's running turn.
func TestQueuedMessageRunsWithTheRuntimeItWasTakenWith(t *testing.T) {
	var oldLog *eventLog
	e := newEnv(t, withObserver(&oldLog))
	block := make(chan struct{})
	e.fake.SetFunc(func(*harness.Request) harness.FakeReply {
		<-block
		return harness.FakeReply{Text: "ok"}
	})
	e.mem.inject(t, "rt", "1", "first")
	waitRequests(t, e.fake, 1)
	e.mem.inject(t, "rt", "2", "second") // waits behind the first turn
	waitEvent(t, oldLog, "message:receive of the second message", func(ev *hooks.MessageReceive) bool { return ev.MessageID == "2" })

	newBus := hooks.NewBus(hooks.Options{Timeout: 5 * time.Second})
	newLog := observe(newBus)
	old := e.g.Runtime()
	e.g.Swap(&Runtime{Bus: newBus, Profiles: profiles.Builtin(""), LLM: old.LLM})
	close(block)
	e.mem.waitDone(t, 2)

	starts := countEvents(oldLog, func(*hooks.AgentStart) bool { return true })
	if starts != 2 {
		t.Errorf("the old runtime's bus saw %d agent_start; want both turns there", starts)
	}
	for _, ev := range newLog.all() {
		if s, ok := ev.(interface{ SessionInfo() *hooks.Session }); ok && strings.HasPrefix(s.SessionInfo().SessionKey, "mem:rt") {
			t.Errorf("the new runtime's bus saw %s of a message taken before the reload", ev.EventName())
		}
	}
}
