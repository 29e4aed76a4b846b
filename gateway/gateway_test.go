package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/channels"
	"gateway/harness"
	"gateway/harness/openaitest"
	"gateway/hooks"
	"gateway/internal/fakeserver"
	"gateway/internal/llm"
	"gateway/profiles"
)

func lastUser(req harness.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == llm.RoleUser {
			return req.Messages[i].Content
		}
	}
	return ""
}

func TestWebChatStreamsStartDeltasDone(t *testing.T) {
	e := newEnv(t)
	e.fake.Push(harness.FakeReply{Chunks: []string{"Hel", "lo ", "there!"}, ChunkDelay: 10 * time.Millisecond})
	c := e.client(t, "chat1")
	id := c.say("hello")
	fs := c.until("done", "error")
	got := types(fs)
	if got[0] != "start" || got[len(got)-1] != "done" || !slices.Contains(got, "delta") {
		t.Fatalf("frames %v; want start, delta..., done", got)
	}
	last := fs[len(fs)-1]
	if last.Text != "Hello there!" || last.ReplyTo != id {
		t.Fatalf("done = %+v; want the full text replying to %s", last, id)
	}
	var streamed strings.Builder
	for _, f := range fs {
		if f.Type == "delta" {
			streamed.WriteString(f.Text)
		}
	}
	if streamed.String() != "Hello there!" {
		t.Errorf("deltas add up to %q", streamed.String())
	}
	if reqs := e.fake.Requests(); len(reqs) != 1 || lastUser(reqs[0]) != "hello" {
		t.Fatalf("provider saw %d requests; want one with 'hello'", len(reqs))
	}
}

func TestReceiveHookTransformChangesWhatTheModelSees(t *testing.T) {
	e := newEnv(t)
	sc := e.bus.Scope("test:upper")
	hooks.Handle(sc, func(ctx context.Context, ev *hooks.MessageReceive) (*hooks.ReceiveResult, error) {
		return &hooks.ReceiveResult{Action: hooks.ActionTransform, Text: strings.ToUpper(ev.Text)}, nil
	})
	c := e.client(t, "chat2")
	c.say("make me loud")
	c.until("done")
	if got := lastUser(e.fake.Requests()[0]); got != "MAKE ME LOUD" {
		t.Fatalf("provider received %q; want the transformed text", got)
	}
}

func TestReceiveHookRejectAnswersReasonAndSkipsModel(t *testing.T) {
	e := newEnv(t)
	hooks.Handle(e.bus.Scope("test:reject"), func(ctx context.Context, ev *hooks.MessageReceive) (*hooks.ReceiveResult, error) {
		if strings.Contains(ev.Text, "forbidden") {
			return &hooks.ReceiveResult{Action: hooks.ActionReject, Reason: "That word is not allowed here."}, nil
		}
		return nil, nil
	})
	c := e.client(t, "chat3")
	c.say("a forbidden word")
	fs := c.until("done", "error")
	if fs[len(fs)-1].Text != "That word is not allowed here." {
		t.Fatalf("got %+v; want the reject reason", fs[len(fs)-1])
	}
	c.say("fine words")
	c.until("done")
	if reqs := e.fake.Requests(); len(reqs) != 1 || lastUser(reqs[0]) != "fine words" {
		t.Fatalf("provider requests = %d; the rejected message must never reach it", len(reqs))
	}
}

func TestSendHookPartsArriveBeforeDone(t *testing.T) {
	e := newEnv(t)
	hooks.Handle(e.bus.Scope("test:send"), func(ctx context.Context, ev *hooks.MessageSend) (*hooks.SendResult, error) {
		return &hooks.SendResult{Parts: []channels.Part{channels.TextPart("appendix to " + ev.ResponseText)}}, nil
	})
	e.fake.Push(harness.FakeReply{Text: "the answer"})
	c := e.client(t, "chat4")
	c.say("question")
	fs := c.until("done")
	var partsAt = -1
	for i, f := range fs {
		if f.Type == "parts" {
			partsAt = i
			if len(f.Parts) != 1 || f.Parts[0]["text"] != "appendix to the answer" {
				t.Fatalf("parts = %v", f.Parts)
			}
		}
	}
	if partsAt < 0 || partsAt != len(fs)-2 {
		t.Fatalf("frames %v; want the parts frame right before done", types(fs))
	}
}

func TestStopCancelsSlowTurnAndEmitsCancel(t *testing.T) {
	e := newEnv(t)
	cancels := make(chan *hooks.MessageCancel, 1)
	hooks.Handle(e.bus.Scope("test:cancel"), func(ctx context.Context, ev *hooks.MessageCancel) (any, error) {
		cancels <- ev
		return nil, nil
	})
	// Two chunks: the hour between them keeps the turn running (one chunk ends it at once).
	e.fake.Push(harness.FakeReply{Chunks: []string{"thinking…", " and more"}, Delay: 50 * time.Millisecond, ChunkDelay: time.Hour})
	c := e.client(t, "chat5")
	c.say("write a novel")
	c.until("delta")
	c.say("/stop")
	var texts []string
	for len(texts) < 2 { // the turn's done and the "Stopped." notice, in either order
		fs := c.until("done", "error")
		texts = append(texts, fs[len(fs)-1].Type+":"+fs[len(fs)-1].Text)
	}
	if !slices.Contains(texts, "done:Stopped.") || !slices.Contains(texts, "done:thinking…") {
		t.Fatalf("after /stop got %v; want the partial answer closed and a Stopped notice", texts)
	}
	select {
	case ev := <-cancels:
		if ev.ChatID != "chat5" || ev.Reason == "" {
			t.Fatalf("message:cancel = %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message:cancel event")
	}
	// The chat keeps working.
	e.fake.Push(harness.FakeReply{Text: "back"})
	c.say("still there?")
	if fs := c.until("done"); fs[len(fs)-1].Text != "back" {
		t.Fatalf("next answer %q", fs[len(fs)-1].Text)
	}
}

func TestFollowupIsAnsweredAfterTheFirst(t *testing.T) {
	e := newEnv(t)
	e.fake.SetFunc(func(req *harness.Request) harness.FakeReply {
		return harness.FakeReply{Text: "answer to " + lastUser(*req), Delay: 200 * time.Millisecond}
	})
	c := e.client(t, "chat6")
	c.say("one")
	c.say("two")
	first := c.until("done")
	second := c.until("done")
	if first[len(first)-1].Text != "answer to one" || second[len(second)-1].Text != "answer to two" {
		t.Fatalf("answers %q then %q", first[len(first)-1].Text, second[len(second)-1].Text)
	}
	if reqs := e.fake.Requests(); len(reqs) != 2 || lastUser(reqs[1]) != "two" {
		t.Fatalf("provider requests %d", len(reqs))
	}
}

func TestCommandsBypassTheModel(t *testing.T) {
	e := newEnv(t)
	c := e.client(t, "chat7")
	for _, cmd := range []string{"/help", "/status", "/voice on", "/new"} { // /voice: "not set up" here
		c.say(cmd)
		fs := c.until("done", "error")
		if fs[len(fs)-1].Type != "done" || fs[len(fs)-1].Text == "" {
			t.Fatalf("%s answered %+v", cmd, fs[len(fs)-1])
		}
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("commands reached the model %d times", n)
	}
}

func TestManyChatsRunInParallelAndEachGetsOneReply(t *testing.T) {
	e := newEnv(t)
	const chats = 200
	var mu sync.Mutex
	starts := map[string]time.Time{}
	e.fake.SetFunc(func(req *harness.Request) harness.FakeReply {
		mu.Lock()
		starts[lastUser(*req)] = time.Now()
		mu.Unlock()
		return harness.FakeReply{Text: "re: " + lastUser(*req), Delay: 200 * time.Millisecond}
	})
	for i := range chats {
		e.mem.inject(t, fmt.Sprint(i), "m1", fmt.Sprintf("msg %d", i))
	}
	e.mem.waitDone(t, chats)
	ends := map[string]time.Time{}
	for i := range chats {
		chat := fmt.Sprint(i)
		if got := e.mem.finals(chat); len(got) != 1 || got[0] != fmt.Sprintf("done:re: msg %d", i) {
			t.Fatalf("chat %s got %v; want exactly one reply to its message", chat, got)
		}
		ends[fmt.Sprintf("msg %d", i)] = time.Now()
	}
	// Overlap from recorded times: turns that started before the first one could have ended.
	var first time.Time
	for _, s := range starts {
		if first.IsZero() || s.Before(first) {
			first = s
		}
	}
	overlapping := 0
	for _, s := range starts {
		if s.Before(first.Add(200 * time.Millisecond)) {
			overlapping++
		}
	}
	if len(starts) != chats || overlapping < 2 {
		t.Fatalf("%d turns started, %d within the first turn's 200 ms; want them to overlap", len(starts), overlapping)
	}
	_ = ends
}

func TestStoreSurvivesTornLineAndRestartContinuesHistory(t *testing.T) {
	dir := t.TempDir()
	e := newEnvIn(t, dir)
	e.mem.inject(t, "42", "a", "my name is Bob")
	e.mem.waitDone(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.g.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("session files: %v", files)
	}
	f, err := os.OpenFile(files[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"type":"message","id":"torn","parentId":`) // a crash mid-append
	f.Close()

	e2 := newEnvIn(t, dir)
	e2.mem.inject(t, "42", "b", "what is my name?")
	e2.mem.waitDone(t, 1)
	reqs := e2.fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("requests %d", len(reqs))
	}
	var history []string
	for _, m := range reqs[0].Messages {
		history = append(history, m.Content)
	}
	if !slices.Contains(history, "my name is Bob") || !slices.Contains(history, "what is my name?") {
		t.Fatalf("restarted session sent %q; want the earlier history and the new message", history)
	}
}

func TestProviderFailingThreeTimesGivesPlainErrorThenRecovers(t *testing.T) {
	srv := openaitest.NewServer()
	t.Cleanup(srv.Close)
	e := newEnv(t, func(c *Config, rt *Runtime, d *Deps) {
		rt.LLM = harness.Config{Provider: "openai", Model: "gpt-test", BaseURL: srv.URL(), MaxRetries: 2}
		d.NewProvider = func(cfg harness.Config) (harness.Provider, error) { return harness.NewProvider(cfg, nil) }
	})
	srv.FailNext(3, fakeserver.Failure{Status: 500})
	c := e.client(t, "chat8")
	c.say("hello?")
	fs := c.until("done", "error")
	last := fs[len(fs)-1]
	if last.Type != "error" || !strings.Contains(strings.ToLower(last.Text), "try again") {
		t.Fatalf("after three 500s got %+v; want a plain-language error", last)
	}
	// Three attempts (max_retries: 2), the chat told of each wait.
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("%d attempts; want 3", n)
	}
	var waits int
	for _, f := range fs {
		if f.Type == "status" && strings.Contains(f.Text, "retrying in") {
			waits++
		}
	}
	if waits != 2 {
		t.Fatalf("the chat was told of %d retries; want 2: %+v", waits, fs)
	}
	c.say("hello again")
	fs = c.until("done", "error")
	if fs[len(fs)-1].Type != "done" || fs[len(fs)-1].Text == "" {
		t.Fatalf("next message got %+v; want an answer", fs[len(fs)-1])
	}
}

func TestQueueModes(t *testing.T) {
	slow := func(req *harness.Request) harness.FakeReply {
		return harness.FakeReply{Text: "re: " + lastUser(*req), Delay: 300 * time.Millisecond}
	}
	mode := func(m string) envOpt {
		return func(c *Config, rt *Runtime, d *Deps) { c.QueueMode = m }
	}
	t.Run("collect merges waiting messages into one turn", func(t *testing.T) {
		e := newEnv(t, mode(QueueCollect))
		e.fake.SetFunc(slow)
		e.mem.inject(t, "c", "1", "first")
		waitRequests(t, e.fake, 1)
		e.mem.inject(t, "c", "2", "second")
		e.mem.inject(t, "c", "3", "third")
		e.mem.waitDone(t, 2)
		got := e.mem.finals("c")
		if len(got) != 2 || got[1] != "done:re: second\n\nthird" {
			t.Fatalf("answers %q; want the two waiting messages answered together", got)
		}
	})
	t.Run("interrupt aborts and answers the newest", func(t *testing.T) {
		e := newEnv(t, mode(QueueInterrupt))
		e.fake.SetFunc(slow)
		e.mem.inject(t, "i", "1", "first")
		waitRequests(t, e.fake, 1)
		e.mem.inject(t, "i", "2", "second")
		e.mem.waitDone(t, 2)
		got := e.mem.finals("i")
		if len(got) != 2 || got[0] != "done:" || got[1] != "done:re: second" {
			t.Fatalf("answers %q; want the first cut off and the second answered", got)
		}
	})
	t.Run("steer joins the running turn", func(t *testing.T) {
		e := newEnv(t, mode(QueueSteer))
		e.fake.Push(harness.FakeReply{ToolCalls: []llm.ToolCall{{ID: "t1", Name: "current_time", Arguments: []byte(`{}`)}}, Delay: 300 * time.Millisecond})
		e.fake.SetFunc(func(req *harness.Request) harness.FakeReply { return harness.FakeReply{Text: "final"} })
		e.g.Runtime().Tools = harness.BuiltinTools
		e.g.Runtime().Profiles.Default().Tools = []string{"current_time"}
		e.mem.inject(t, "s", "1", "first")
		waitRequests(t, e.fake, 1)
		e.mem.inject(t, "s", "2", "also this")
		e.mem.waitDone(t, 1)
		reqs := e.fake.Requests()
		if got := e.mem.finals("s"); len(got) != 1 || len(reqs) != 2 || lastUser(reqs[1]) != "also this" {
			t.Fatalf("answers %q, %d requests; want the steered text in the running turn's next model call", got, len(reqs))
		}
	})
}

func waitRequests(t *testing.T, f *harness.Fake, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(f.Requests()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("provider got %d requests; want %d", len(f.Requests()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFullQueueTellsTheUser(t *testing.T) {
	e := newEnv(t, func(c *Config, rt *Runtime, d *Deps) { c.QueueSize = 1 })
	block := make(chan struct{})
	hooks.Handle(e.bus.Scope("test:block"), func(ctx context.Context, ev *hooks.MessageReceive) (*hooks.ReceiveResult, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil, nil
	})
	e.mem.inject(t, "q", "1", "one")  // taken by the actor, blocked in its hook
	time.Sleep(50 * time.Millisecond) // let the actor take it off the mailbox
	e.mem.inject(t, "q", "2", "two")  // fills the mailbox
	e.mem.inject(t, "q", "3", "three")
	e.mem.waitDone(t, 1)
	if got := e.mem.finals("q"); len(got) != 1 || !strings.Contains(got[0], "send it again") {
		t.Fatalf("got %q; want a notice that the message was not queued", got)
	}
	close(block)
	e.mem.waitDone(t, 2)
}

func TestShutdownLetsRunningTurnFinish(t *testing.T) {
	e := newEnv(t)
	e.fake.Push(harness.FakeReply{Text: "finished", Delay: 300 * time.Millisecond})
	e.mem.inject(t, "sd", "1", "work")
	waitRequests(t, e.fake, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.g.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.mem.finals("sd"); len(got) != 1 || got[0] != "done:finished" {
		t.Fatalf("got %q; want the in-flight turn to finish before shutdown", got)
	}
	if err := e.mem.sink.Deliver(context.Background(), &channels.Message{Channel: "mem", ChatID: "sd"}); err == nil {
		t.Fatal("a stopped gateway accepted a message")
	}
}

func TestBindingPicksProfileSystemPrompt(t *testing.T) {
	e := newEnv(t)
	e.mem.inject(t, "p", "1", "hi")
	e.mem.waitDone(t, 1)
	if sys := e.fake.Requests()[0].System; sys != profiles.DefaultSystemPrompt {
		t.Fatalf("system prompt %q; want the default profile's", sys)
	}
}

// The turns waiting behind a running one are bounded by queue_size too: a chat that keeps
// writing during a long turn is told to send again, not queued without end.
func TestWaitingTurnsAreBoundedByTheQueueSize(t *testing.T) {
	e := newEnv(t, func(c *Config, rt *Runtime, d *Deps) { c.QueueSize = 2 })
	e.fake.Push(harness.FakeReply{Text: "first", Delay: 3 * time.Second})
	e.mem.inject(t, "b", "1", "one")
	waitRequests(t, e.fake, 1)
	for i := 2; i <= 6; i++ {
		e.mem.inject(t, "b", fmt.Sprint(i), fmt.Sprint("msg ", i))
		time.Sleep(100 * time.Millisecond) // taken off the mailbox, into the waiting turns
	}
	e.mem.waitDone(t, 3) // three are told: two wait behind the running turn
	for _, f := range e.mem.finals("b") {
		if !strings.Contains(f, "send it again") {
			t.Fatalf("got %q before the running turn ended; want only notices", e.mem.finals("b"))
		}
	}
	e.mem.waitDone(t, 3) // the running turn and the two waiting ones
	got := e.mem.finals("b")
	if len(got) != 6 {
		t.Fatalf("answers %q; want three notices and three answers", got)
	}
	if n := len(e.fake.Requests()); n != 3 {
		t.Fatalf("model calls = %d; want 3 (one running, two waiting)", n)
	}
}

// A chat whose history file cannot be read (here a directory stands in its place; in
// practice a file left by a run as another user, or a failing disk) is told in plain words
// that its conversation cannot be opened, without the server's paths or the system's error,
// which go to the admin's log; other chats are answered as usual.
func TestAnUnreadableHistoryIsToldInPlainWords(t *testing.T) {
	e := newEnv(t)
	name, err := harness.FileName("mem:c1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(e.dir, name), 0o700); err != nil {
		t.Fatal(err)
	}
	e.mem.inject(t, "c1", "1", "hello")
	e.mem.inject(t, "c2", "1", "hello")
	e.mem.waitDone(t, 2)
	got := e.mem.finals("c1")
	if len(got) != 1 || !strings.HasPrefix(got[0], "error:") || !strings.Contains(got[0], "conversation") {
		t.Fatalf("the chat was told %q; want an error saying its conversation cannot be opened", got)
	}
	for _, leak := range []string{e.dir, name, "is a directory", "history of"} {
		if strings.Contains(got[0], leak) {
			t.Errorf("the chat was told %q, which shows %q", got[0], leak)
		}
	}
	if got := e.mem.finals("c2"); len(got) != 1 || !strings.HasPrefix(got[0], "done:") {
		t.Errorf("the other chat got %q; want its answer", got)
	}
}
