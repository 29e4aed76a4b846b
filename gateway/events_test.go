package gateway

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
	"gateway/channels/slack"
	"gateway/channels/slack/slacktest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/harness"
	"gateway/hooks"
	"gateway/internal/secret"
	"gateway/profiles"
)

// eventLog is an observing hook: it records every event its bus emits, in order.
type eventLog struct {
	mu  sync.Mutex
	evs []hooks.Event
}

func observe(bus *hooks.Bus) *eventLog {
	l := &eventLog{}
	bus.Observe("test:observer", func(ctx context.Context, ev hooks.Event) {
		l.mu.Lock()
		l.evs = append(l.evs, ev)
		l.mu.Unlock()
	})
	return l
}

// withObserver registers l on the initial runtime's bus before Start, so it sees startup too.
func withObserver(l **eventLog) envOpt {
	return func(c *Config, rt *Runtime, d *Deps) { *l = observe(rt.Bus) }
}

func (l *eventLog) all() []hooks.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.evs)
}

func (l *eventLog) names() []string {
	var out []string
	for _, ev := range l.all() {
		out = append(out, ev.EventName())
	}
	return out
}

// waitEvent polls for an event of type T that match accepts.
func waitEvent[T hooks.Event](t *testing.T, l *eventLog, what string, match func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, ev := range l.all() {
			if e, ok := ev.(T); ok && match(e) {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s; events seen: %v", what, l.names())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func countEvents[T hooks.Event](l *eventLog, match func(T) bool) int {
	n := 0
	for _, ev := range l.all() {
		if e, ok := ev.(T); ok && match(e) {
			n++
		}
	}
	return n
}

func TestObserverSeesEveryChannelConnectBeforeStartup(t *testing.T) {
	access := channels.Access{AllowFrom: []string{"4242"}, DMPolicy: channels.DMAllowlist}
	tg := telegramtest.NewServer(t)
	tgCh, err := telegram.New(telegram.Config{Enabled: true, Token: secret.Secret(tg.Token), APIURL: tg.URL,
		Mode: telegram.ModePolling, Access: access}, telegram.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	dc := discordtest.New(t)
	dcCh, err := discord.New(discord.Config{Enabled: true, Token: secret.Secret(dc.Bot().Token), APIURL: dc.URL, Access: access},
		discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sl := slacktest.New(t)
	slCh, err := slack.New(slack.Config{Enabled: true, BotToken: secret.Secret(slacktest.BotToken), AppToken: secret.Secret(slacktest.AppToken),
		APIURL: sl.APIURL(), Access: access}, slack.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var log *eventLog
	e := newEnvWith(t, t.TempDir(), []channels.Channel{tgCh, dcCh, slCh}, withObserver(&log))

	evs := log.all()
	startup := slices.IndexFunc(evs, func(ev hooks.Event) bool { return ev.EventName() == hooks.NameGatewayStartup })
	if startup < 0 {
		t.Fatalf("no gateway:startup after Start; events: %v", log.names())
	}
	if n := countEvents(log, func(*hooks.GatewayStartup) bool { return true }); n != 1 {
		t.Fatalf("gateway:startup emitted %d times", n)
	}
	connected := map[string]bool{}
	for _, ev := range evs[:startup] {
		if c, ok := ev.(*hooks.ChannelConnect); ok {
			connected[c.Channel] = true
		}
	}
	var want []string
	for _, ch := range e.g.channels {
		want = append(want, ch.Name())
		if !connected[ch.Name()] {
			t.Errorf("channel:connect for %s did not come before gateway:startup; events: %v", ch.Name(), log.names())
		}
	}
	if got := evs[startup].(*hooks.GatewayStartup).Channels; !slices.Equal(got, want) {
		t.Errorf("gateway:startup lists %v; want %v", got, want)
	}
}

func TestTurnTimeoutTellsTheUserAndEmitsCancelAndError(t *testing.T) {
	var log *eventLog
	e := newEnv(t, withObserver(&log), func(c *Config, rt *Runtime, d *Deps) { c.TurnTimeout = 300 * time.Millisecond })
	e.fake.Push(harness.FakeReply{Chunks: []string{"let me think", "…"}, ChunkDelay: time.Hour})
	c := e.client(t, "slow")
	c.say("solve everything")
	fs := c.until("done", "error")
	last := fs[len(fs)-1]
	text := strings.ToLower(last.Text)
	if last.Type != "error" || !strings.Contains(text, "took too long") || strings.Contains(text, "context") || strings.Contains(text, "deadline") {
		t.Fatalf("the user was told %+v; want an error in plain words saying the answer took too long", last)
	}
	cancel := waitEvent(t, log, "message:cancel", func(ev *hooks.MessageCancel) bool { return ev.ChatID == "slow" })
	if !strings.Contains(cancel.Reason, "turn_timeout") || cancel.SessionKey != "web:slow" {
		t.Errorf("message:cancel = %+v; want the chat's session and a turn_timeout reason", cancel)
	}
	gerr := waitEvent(t, log, "gateway:error", func(ev *hooks.GatewayError) bool { return ev.ChatID == "slow" })
	if gerr.Stage != "turn" || !strings.Contains(gerr.Error, "turn_timeout") || gerr.Profile == "" {
		t.Errorf("gateway:error = %+v; want stage turn naming turn_timeout", gerr)
	}
}

func TestShutdownCutEmitsCancelAndTellsTheUser(t *testing.T) {
	var log *eventLog
	e := newEnv(t, withObserver(&log))
	e.fake.SetFunc(func(req *harness.Request) harness.FakeReply {
		if lastUser(*req) == "tell me a story" {
			return harness.FakeReply{Chunks: []string{"a long story", " goes on"}, ChunkDelay: time.Hour}
		}
		return harness.FakeReply{Delay: time.Hour}
	})
	e.mem.inject(t, "cut", "1", "tell me a story")
	e.mem.inject(t, "mute", "1", "think hard")
	waitRequests(t, e.fake, 2)
	e.mem.inject(t, "cut", "2", "and then?") // waits behind the running turn
	e.mem.inject(t, "cut", "3", "hello?")
	deadline := time.Now().Add(30 * time.Second)
	for !slices.ContainsFunc(e.mem.frames("cut"), func(f channels.Frame) bool { return f.Type == channels.FrameDelta }) {
		if time.Now().After(deadline) {
			t.Fatal("the first chat never streamed")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Stop's deadline passes while both turns still run: they are cut.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.g.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, chat := range []string{"cut", "mute"} {
		ev := waitEvent(t, log, "message:cancel for "+chat, func(ev *hooks.MessageCancel) bool { return ev.ChatID == chat })
		if !strings.Contains(ev.Reason, "shutting down") {
			t.Errorf("message:cancel for %s has reason %q; want shutdown named", chat, ev.Reason)
		}
	}
	if got := e.mem.finals("cut"); len(got) != 2 || !strings.HasPrefix(got[0], "done:a long story") || !strings.Contains(got[0], "restarting") ||
		!strings.Contains(got[1], "restarting") || !strings.Contains(got[1], "send them again") {
		t.Errorf("the chat cut mid-answer got %q; want what was said kept, the restart named, and one notice for the waiting messages", got)
	}
	if n := len(e.fake.Requests()); n != 2 {
		t.Errorf("the model was called %d times; the waiting messages must not start turns at shutdown", n)
	}
	if got := e.mem.finals("mute"); len(got) != 1 || !strings.Contains(got[0], "restarting") || !strings.Contains(got[0], "again") {
		t.Errorf("the chat cut before any answer got %q; want a plain notice to send again", got)
	}
}

// A reload during a turn: its cancel and error events still go to the hooks it started with.
func TestCancelAndErrorGoToTheTurnsRuntime(t *testing.T) {
	var oldLog *eventLog
	e := newEnv(t, withObserver(&oldLog), func(c *Config, rt *Runtime, d *Deps) { c.TurnTimeout = 2 * time.Second })
	e.fake.SetFunc(func(*harness.Request) harness.FakeReply {
		return harness.FakeReply{Chunks: []string{"working", "…"}, ChunkDelay: time.Hour}
	})
	newRT := func() (*Runtime, *eventLog) {
		rt := &Runtime{Bus: hooks.NewBus(hooks.Options{Timeout: 5 * time.Second}), Profiles: profiles.Builtin(""),
			LLM: harness.Config{Provider: "fake", Model: "fake-1"}}
		return rt, observe(rt.Bus)
	}

	e.mem.inject(t, "r", "1", "first")
	waitRequests(t, e.fake, 1)
	rt2, log2 := newRT()
	e.g.Swap(rt2)
	e.mem.inject(t, "r", "2", "/stop")
	e.mem.waitDone(t, 2) // the cut answer and "Stopped."
	waitEvent(t, oldLog, "message:cancel on the turn's bus", func(ev *hooks.MessageCancel) bool { return ev.ChatID == "r" })
	if n := countEvents(log2, func(*hooks.MessageCancel) bool { return true }); n != 0 {
		t.Errorf("the runtime loaded after the turn started saw %d message:cancel", n)
	}

	// The next turn starts on rt2; a reload to rt3 meanwhile; it then runs out of time.
	e.mem.inject(t, "r", "3", "second")
	waitRequests(t, e.fake, 2)
	rt3, log3 := newRT()
	e.g.Swap(rt3)
	e.mem.waitDone(t, 1)
	waitEvent(t, log2, "gateway:error on the turn's bus", func(ev *hooks.GatewayError) bool { return ev.Stage == "turn" })
	waitEvent(t, log2, "message:cancel on the turn's bus", func(ev *hooks.MessageCancel) bool { return ev.ChatID == "r" })
	if n := countEvents(log3, func(*hooks.GatewayError) bool { return true }) + countEvents(log3, func(*hooks.MessageCancel) bool { return true }); n != 0 {
		t.Errorf("the runtime loaded after the turn started saw %d of its cancel/error events", n)
	}
}

func TestFailingReceiveHookEmitsReceiveErrorAndTheMessageIsAnswered(t *testing.T) {
	var log *eventLog
	e := newEnv(t, withObserver(&log))
	hooks.Handle(e.bus.Scope("dir:hooks/broken-filter"), func(ctx context.Context, ev *hooks.MessageReceive) (*hooks.ReceiveResult, error) {
		return nil, errors.New("exit status 2")
	})
	e.fake.Push(harness.FakeReply{Text: "answered"})
	e.mem.inject(t, "rh", "1", "hello")
	e.mem.waitDone(t, 1)
	if got := e.mem.finals("rh"); len(got) != 1 || got[0] != "done:answered" {
		t.Fatalf("got %q; a failed hook is skipped and the message still answered", got)
	}
	ev := waitEvent(t, log, "gateway:error at the receive stage", func(ev *hooks.GatewayError) bool { return ev.Stage == "receive" })
	if ev.ChatID != "rh" || ev.UserID != "urh" || !strings.Contains(ev.Error, "dir:hooks/broken-filter") || !strings.Contains(ev.Error, "exit status 2") {
		t.Fatalf("gateway:error = %+v; want the chat and the failed hook named", ev)
	}
}

func TestReceiveHooksOutOfTimeStopTheMessage(t *testing.T) {
	var log *eventLog
	e := newEnv(t, withObserver(&log), func(c *Config, rt *Runtime, d *Deps) { c.TurnTimeout = 300 * time.Millisecond })
	hooks.Handle(e.bus.Scope("test:stuck"), func(ctx context.Context, ev *hooks.MessageReceive) (*hooks.ReceiveResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}, hooks.WithTimeout(time.Hour))
	e.mem.inject(t, "st", "1", "hello")
	e.mem.waitDone(t, 1)
	if got := e.mem.finals("st"); len(got) != 1 || !strings.Contains(got[0], "couldn't process your message") {
		t.Fatalf("got %q; want a plain notice", got)
	}
	ev := waitEvent(t, log, "gateway:error at the receive stage", func(ev *hooks.GatewayError) bool { return ev.Stage == "receive" })
	if ev.ChatID != "st" || !strings.Contains(ev.Error, "turn_timeout") {
		t.Fatalf("gateway:error = %+v", ev)
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("the model was called %d times with a message its receive hooks never finished", n)
	}
}

func TestFullQueueEmitsReceiveError(t *testing.T) {
	var log *eventLog
	e := newEnv(t, withObserver(&log), func(c *Config, rt *Runtime, d *Deps) { c.QueueSize = 1 })
	entered, block := make(chan struct{}, 10), make(chan struct{})
	hooks.Handle(e.bus.Scope("test:block"), func(ctx context.Context, ev *hooks.MessageReceive) (*hooks.ReceiveResult, error) {
		entered <- struct{}{}
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil, nil
	})
	e.mem.inject(t, "q", "1", "one")
	select { // the actor took it off the mailbox and waits in the hook
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the receive hook was never called")
	}
	e.mem.inject(t, "q", "2", "two") // fills the mailbox
	e.mem.inject(t, "q", "3", "three")
	ev := waitEvent(t, log, "gateway:error for the full queue", func(ev *hooks.GatewayError) bool {
		return ev.Stage == "receive" && strings.Contains(ev.Error, "queue")
	})
	if ev.ChatID != "q" || ev.UserID != "uq" || ev.Profile == "" || !strings.Contains(ev.Error, "sessions.queue_size") {
		t.Fatalf("gateway:error = %+v; want the chat and the full queue named", ev)
	}
	close(block)
	e.mem.waitDone(t, 3)
}

// /stop does not wait behind a message whose receive hooks are still running (a slow
// filter, speech to text): it cuts them, the message is dropped and never reaches the
// model, and the user hears so at once.
func TestStopOvertakesAMessageInItsReceiveHooks(t *testing.T) {
	e := newEnv(t, func(c *Config, rt *Runtime, d *Deps) { c.TurnTimeout = time.Hour })
	entered := make(chan struct{}, 10)
	hooks.Handle(e.bus.Scope("test:slow"), func(ctx context.Context, ev *hooks.MessageReceive) (*hooks.ReceiveResult, error) {
		if ev.Text == "slow to take in" {
			entered <- struct{}{}
			<-ctx.Done()
		}
		return nil, nil
	}, hooks.WithTimeout(time.Hour))
	e.mem.inject(t, "st", "1", "slow to take in")
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the receive hook was never called")
	}
	e.mem.inject(t, "st", "2", "/stop")
	e.mem.waitDone(t, 1)
	if got := e.mem.finals("st"); len(got) != 1 || got[0] != "done:Dropped 1 queued message(s)." {
		t.Fatalf("after /stop the chat got %q; want the message in its hooks dropped, and told", got)
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("the model was called %d times with the message /stop dropped", n)
	}
}
