// Package storetest is the behaviour every harness.SessionStore must show: the JSONL store,
// the Postgres store of cluster mode and the in-memory Memory store all run Run.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"gateway/harness"
)

// Run checks a store from open, which returns a fresh, empty store each call; reopen, when
// set, opens the same store again after Close (a restart); nil skips the restart cases.
func Run(t *testing.T, open func(t *testing.T) harness.SessionStore, reopen func(t *testing.T) harness.SessionStore) {
	t.Run("EmptyLogIsNil", func(t *testing.T) {
		st := open(t)
		defer st.Close()
		b, err := st.ReadLog("telegram:1")
		if err != nil || len(b) != 0 {
			t.Fatalf("ReadLog of a new key = %q, %v", b, err)
		}
	})
	t.Run("AppendsReadBackInOrderPerKey", func(t *testing.T) {
		st := open(t)
		defer st.Close()
		for i := range 5 {
			for _, k := range []string{"a:1", "b:2"} {
				if err := st.AppendLog(k, fmt.Appendf(nil, "{\"n\":%d,\"k\":%q}\n", i, k)); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, k := range []string{"a:1", "b:2"} {
			b, err := st.ReadLog(k)
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			for i := range 5 {
				fmt.Fprintf(&want, "{\"n\":%d,\"k\":%q}\n", i, k)
			}
			if string(b) != want.String() {
				t.Fatalf("log of %s = %q; want %q", k, b, want.String())
			}
		}
	})
	t.Run("ConcurrentKeys", func(t *testing.T) {
		st := open(t)
		defer st.Close()
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Go(func() {
				for i := range 10 {
					if err := st.AppendLog(fmt.Sprint("k:", g), fmt.Appendf(nil, "%d\n", i)); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for g := range 8 {
			b, _ := st.ReadLog(fmt.Sprint("k:", g))
			if string(b) != "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n" {
				t.Fatalf("k:%d = %q", g, b)
			}
		}
	})
	t.Run("AppendAfterCloseFails", func(t *testing.T) {
		st := open(t)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if err := st.AppendLog("a:1", []byte("{}\n")); err == nil {
			t.Fatal("append after Close succeeded")
		}
	})
	t.Run("SessionContinuesHistory", func(t *testing.T) {
		st := open(t)
		defer st.Close()
		fake := harness.NewFake(harness.FakeReply{Text: "Hi Bob"}, harness.FakeReply{Text: "You are Bob"})
		opts := harness.SessionOptions{Key: "discord:7:99", Store: st, Provider: fake}
		run(t, opts, "I am Bob")
		run(t, opts, "who am I?") // a new Session: the history is read back from the store
		sent(t, fake, "I am Bob", "Hi Bob", "who am I?")
		log, err := st.ReadLog("discord:7:99")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(log), `{"type":"session"`) || strings.Count(string(log), `"type":"session"`) != 1 {
			t.Fatalf("the log does not start with exactly one header:\n%s", log)
		}
	})
	t.Run("ResetIsKept", func(t *testing.T) {
		st := open(t)
		defer st.Close()
		fake := harness.NewFake()
		opts := harness.SessionOptions{Key: "slack:C1:T1", Store: st, Provider: fake}
		s := session(t, opts)
		if _, err := s.Run(context.Background(), "old topic", nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Reset(context.Background()); err != nil {
			t.Fatal(err)
		}
		run(t, opts, "new topic")
		sent(t, fake, "new topic")
	})
	t.Run("MoveLogGivesTheConversationToTheNewKey", func(t *testing.T) {
		st := open(t)
		defer st.Close()
		fake := harness.NewFake(harness.FakeReply{Text: "noted"}, harness.FakeReply{Text: "blue"})
		run(t, harness.SessionOptions{Key: "telegram:-5", Store: st, Provider: fake}, "my colour is blue")
		before, _ := st.ReadLog("telegram:-5")
		if m, err := st.MoveLog("telegram:-5", "telegram:-1005"); m != harness.LogMoved || err != nil {
			t.Fatalf("MoveLog = %v, %v; want moved", m, err)
		}
		if b, err := st.ReadLog("telegram:-5"); len(b) != 0 || err != nil {
			t.Fatalf("the old key still has a log after the move: %q, %v", b, err)
		}
		after, _ := st.ReadLog("telegram:-1005")
		if !bytes.Equal(after, harness.Rekey(before, "telegram:-1005")) || !bytes.Contains(after, []byte(`"key":"telegram:-1005"`)) {
			t.Fatalf("the moved log is not the old one with its header naming the new key:\n%s\nwas\n%s", after, before)
		}
		run(t, harness.SessionOptions{Key: "telegram:-1005", Store: st, Provider: fake}, "what is my colour?")
		sent(t, fake, "my colour is blue", "noted", "what is my colour?")

		// Done again (the second service message, a redelivery): nothing more moves.
		moved, _ := st.ReadLog("telegram:-1005")
		if m, err := st.MoveLog("telegram:-5", "telegram:-1005"); m != harness.LogAbsent || err != nil {
			t.Fatalf("MoveLog again = %v, %v; want absent", m, err)
		}
		if b, _ := st.ReadLog("telegram:-1005"); !bytes.Equal(b, moved) {
			t.Fatalf("a repeated move changed the log:\n%s\nwas\n%s", b, moved)
		}
	})
	t.Run("MoveLogKeepsAHistoryTheNewKeyHas", func(t *testing.T) {
		st := open(t)
		defer st.Close()
		for _, k := range []string{"telegram:-6", "telegram:-1006"} {
			if err := st.AppendLog(k, fmt.Appendf(nil, "{\"type\":\"session\",\"key\":%q}\n", k)); err != nil {
				t.Fatal(err)
			}
		}
		if m, err := st.MoveLog("telegram:-6", "telegram:-1006"); m != harness.LogKept || err != nil {
			t.Fatalf("MoveLog = %v, %v; want kept", m, err)
		}
		for _, k := range []string{"telegram:-6", "telegram:-1006"} {
			if b, _ := st.ReadLog(k); string(b) != fmt.Sprintf("{\"type\":\"session\",\"key\":%q}\n", k) {
				t.Fatalf("the log of %s changed: %q", k, b)
			}
		}
		if m, err := st.MoveLog("telegram:-7", "telegram:-1007"); m != harness.LogAbsent || err != nil {
			t.Fatalf("MoveLog of a key without a log = %v, %v; want absent", m, err)
		}
	})
	t.Run("ABadLineInTheMiddleKeepsTheConversation", func(t *testing.T) {
		st := open(t)
		defer st.Close()
		fake := harness.NewFake(harness.FakeReply{Text: "noted blue"}, harness.FakeReply{Text: "noted red"}, harness.FakeReply{Text: "blue and red"})
		run(t, harness.SessionOptions{Key: "telegram:50", Store: st, Provider: fake}, "my colour is blue")
		run(t, harness.SessionOptions{Key: "telegram:50", Store: st, Provider: fake}, "my other colour is red")
		log, err := st.ReadLog("telegram:50")
		if err != nil {
			t.Fatal(err)
		}
		// Line 3 (the first answer) is damaged; a chat with that log still has the rest.
		lines := strings.SplitAfter(string(log), "\n")
		if len(lines) < 6 || !strings.Contains(lines[2], "noted blue") {
			t.Fatalf("unexpected log:\n%s", log)
		}
		lines[2] = "#%&!damaged line\n"
		if err := st.AppendLog("telegram:51", []byte(strings.Join(lines, ""))); err != nil {
			t.Fatal(err)
		}
		opts := harness.SessionOptions{Key: "telegram:51", Store: st, Provider: fake}
		run(t, opts, "what are my colours?")
		sent(t, fake, "my colour is blue", "my other colour is red", "noted red", "what are my colours?")
		after, _ := st.ReadLog("telegram:51")
		if !strings.Contains(string(after), "#%&!damaged line\n") {
			t.Fatalf("the damaged line was not kept:\n%s", after)
		}
		// And again, with the new turn after it.
		fake.Push(harness.FakeReply{Text: "ok"})
		run(t, opts, "thanks")
		sent(t, fake, "my colour is blue", "my other colour is red", "noted red", "what are my colours?", "blue and red", "thanks")
	})
	t.Run("ALostToolCallLeavesNoUnpairedResult", func(t *testing.T) {
		st := open(t)
		defer st.Close()
		// The assistant's tool call (line 3) is damaged: its result would follow nothing.
		log := `{"type":"session","version":1,"id":"h","timestamp":"2025-01-01T00:00:00Z","key":"telegram:52"}
{"type":"message","id":"a1","parentId":null,"timestamp":"2025-01-01T00:00:01Z","message":{"role":"user","content":"order 7?"}}
{"type":"message","id":"a2","parentId":"a1","timestamp":"2025-01-01T00:00:0
{"type":"message","id":"a3","parentId":"a2","timestamp":"2025-01-01T00:00:03Z","message":{"role":"tool","content":"shipped","tool_call_id":"c1","name":"lookup"}}
{"type":"message","id":"a4","parentId":"a3","timestamp":"2025-01-01T00:00:04Z","message":{"role":"assistant","content":"It shipped."}}
`
		if err := st.AppendLog("telegram:52", []byte(log)); err != nil {
			t.Fatal(err)
		}
		fake := harness.NewFake(harness.FakeReply{Text: "yes"})
		run(t, harness.SessionOptions{Key: "telegram:52", Store: st, Provider: fake}, "sure?")
		sent(t, fake, "order 7?", "It shipped.", "sure?")
	})
	if reopen == nil {
		return
	}
	t.Run("HistorySurvivesRestart", func(t *testing.T) {
		st := open(t)
		fake := harness.NewFake(harness.FakeReply{Text: "noted"}, harness.FakeReply{Text: "blue"})
		opts := harness.SessionOptions{Key: "telegram:42", Store: st, Provider: fake}
		run(t, opts, "my colour is blue")
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		st = reopen(t)
		defer st.Close()
		opts.Store = st
		run(t, opts, "what is my colour?")
		sent(t, fake, "my colour is blue", "noted", "what is my colour?")
	})
}

func session(t *testing.T, opts harness.SessionOptions) *harness.Session {
	t.Helper()
	s, err := harness.OpenSession(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func run(t *testing.T, opts harness.SessionOptions, text string) {
	t.Helper()
	if _, err := session(t, opts).Run(context.Background(), text, nil); err != nil {
		t.Fatal(err)
	}
}

// sent checks the messages of the fake's last request.
func sent(t *testing.T, fake *harness.Fake, want ...string) {
	t.Helper()
	reqs := fake.Requests()
	if len(reqs) == 0 {
		t.Fatal("no request")
	}
	m := reqs[len(reqs)-1].Messages
	var got []string
	for _, x := range m {
		got = append(got, x.Content)
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the model was sent %q; want %q", got, want)
	}
}

// Memory is a SessionStore in memory: what a store that is not a directory of files looks
// like to the harness (it reads and appends whole logs).
type Memory struct {
	mu     sync.Mutex
	logs   map[string][]byte
	closed bool
}

// NewMemory returns an empty Memory store.
func NewMemory() *Memory { return &Memory{logs: map[string][]byte{}} }

// ReadLog implements harness.SessionStore.
func (m *Memory) ReadLog(key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return bytes.Clone(m.logs[key]), nil
}

// AppendLog implements harness.SessionStore.
func (m *Memory) AppendLog(key string, lines []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("the history store is closed")
	}
	m.logs[key] = append(m.logs[key], lines...)
	return nil
}

// MoveLog implements harness.SessionStore.
func (m *Memory) MoveLog(from, to string) (harness.LogMove, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, errors.New("the history store is closed")
	}
	switch {
	case len(m.logs[from]) == 0:
		return harness.LogAbsent, nil
	case len(m.logs[to]) > 0:
		return harness.LogKept, nil
	}
	m.logs[to] = harness.Rekey(m.logs[from], to)
	delete(m.logs, from)
	return harness.LogMoved, nil
}

// Close implements harness.SessionStore.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// Reopen is the same store after a restart: what was appended is there, appends work again.
func (m *Memory) Reopen() *Memory {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = false
	return m
}
