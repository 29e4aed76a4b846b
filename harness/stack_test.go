package harness_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"gateway/harness"
	"gateway/harness/anthropictest"
	"gateway/harness/openaitest"
	"gateway/internal/llm"
	"gateway/internal/secret"
)

// A model call waiting for the next chunk holds a small stack. With a hundred chats
// waiting on the model at once, what each waiting call's goroutine holds is most of the
// gateway's memory: encoding the request and decoding events with the SDKs' own encoders
// and decoders, and their params and events held by value in the provider's frame, had
// grown it to 32 KB (OpenAI) or 64 KB (Anthropic), kept for the whole wait.
func TestWaitingModelCallsHoldSmallStacks(t *testing.T) {
	// Each waiting call: its own goroutine, the HTTP connection's two and the fake server's
	// side of it, 30-40 KB in all (both providers, their requests and event streams read
	// by the harness); 42 KB with the SDKs' request paths, before that 58 KB (OpenAI) and
	// 52 KB (Anthropic).
	// The race detector's instrumentation makes frames larger and these figures vary
	// more: about 51 and 56-64 KB, before 66 and 90 KB.
	bound := func(race uint64) uint64 {
		if raceBuild {
			return race << 10
		}
		return 50 << 10
	}
	t.Run("openai", func(t *testing.T) {
		srv := newOpenAIServer(t)
		srv.Push(openaitest.Reply{Text: "warm"})
		srv.SetFunc(func(openaitest.Request) openaitest.Reply {
			return openaitest.Reply{Chunks: []string{"first words"}, Hang: true}
		})
		checkWaitingStacks(t, openAI(t, srv), bound(58))
	})
	t.Run("anthropic", func(t *testing.T) {
		srv := anthropictest.NewServer()
		t.Cleanup(srv.Close)
		srv.Push(anthropictest.Reply{Text: "warm"})
		srv.SetFunc(func(anthropictest.Request) anthropictest.Reply {
			return anthropictest.Reply{Chunks: []string{"first words", "never"}, ChunkDelay: time.Hour}
		})
		p, err := harness.NewProvider(harness.Config{Provider: "anthropic", Model: "claude-test", BaseURL: srv.URL(), APIKey: secret.Secret(testKey)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkWaitingStacks(t, p, bound(74))
	})
}

// checkWaitingStacks runs one call (the encoders' type caches are built once per
// process), then 40 at once, and measures the stacks they hold once each has its first
// text and waits for more.
func checkWaitingStacks(t *testing.T, p harness.Provider, bound uint64) {
	t.Helper()
	req := &harness.Request{System: "Be brief.", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello there"}}}
	if _, err := p.Stream(context.Background(), req, func(string) {}); err != nil {
		t.Fatal(err)
	}
	const calls = 40
	before := stackBytes()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	started := make(chan struct{}, calls)
	for range calls {
		wg.Go(func() {
			var once sync.Once
			_, _ = p.Stream(ctx, req, func(string) { once.Do(func() { started <- struct{}{} }) })
		})
	}
	deadline := time.After(30 * time.Second)
	for range calls {
		select {
		case <-started:
		case <-deadline:
			t.Fatal("timed out waiting for every call's first text")
		}
	}
	per := (stackBytes() - before) / calls
	t.Logf("%d KB of stack per waiting call", per>>10)
	if per > bound {
		t.Errorf("%d KB of stack per waiting model call; want at most %d KB", per>>10, bound>>10)
	}
}

// stackBytes is the memory of goroutine stacks after a collection (which shrinks stacks
// that use little of theirs).
func stackBytes() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// A turn waiting for the model holds an 8 KB stack, not 16: it waits with the harness's
// frames (RunWith, the steps of the run, the retries, the media wrapper, the provider)
// and the SDK's and net/http's under them, and the harness's frames had made that more
// than 8 KB deep, so the stack doubled to 16 KB and stayed so for the whole wait.
// Measured while the turns wait for the response's headers (a slow model); the same
// frames are under the wait for the next chunk, where the fake server's own side, which
// this measure includes, varies too much to tell 8 KB.
func TestWaitingTurnHoldsASmallStack(t *testing.T) {
	// Per waiting turn: its goroutine (8 KB; 16 before), the HTTP connection's two and
	// the fake server's side of it, 26-30 KB in all; 35-37 KB before.
	bound := uint64(32 << 10)
	if raceBuild {
		bound = 64 << 10 // the race detector's frames are larger: not measured
	}
	srv := newOpenAIServer(t)
	p := openAI(t, srv)
	store := openStore(t)
	warm := openSession(t, harness.SessionOptions{Key: "test:warm", Store: store, Provider: p, System: "Be brief."})
	srv.Push(openaitest.Reply{Text: "warm"})
	if _, err := warm.Run(context.Background(), "hello", nil); err != nil { // the encoders' caches are built once
		t.Fatal(err)
	}
	srv.SetFunc(func(openaitest.Request) openaitest.Reply { return openaitest.Reply{Text: "never", Delay: time.Hour} })

	const turns = 40
	sessions := make([]*harness.Session, turns)
	for i := range sessions {
		sessions[i] = openSession(t, harness.SessionOptions{Key: fmt.Sprintf("test:%d", i), Store: store, Provider: p, System: "Be brief."})
	}
	before := stackBytes()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, s := range sessions {
		wg.Go(func() { _, _ = s.RunWith(ctx, "hello there", nil, nil) })
	}
	// The fake records a request before it waits to answer.
	for deadline := time.Now().Add(30 * time.Second); len(srv.Requests()) < turns+1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for every turn to wait on the model")
		}
	}
	per := (stackBytes() - before) / turns
	t.Logf("%.1f KB of stack per waiting turn", float64(per)/1024)
	if per > bound {
		t.Errorf("%.1f KB of stack per turn waiting on the model; want at most %d KB", float64(per)/1024, bound>>10)
	}
}
