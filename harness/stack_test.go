package harness_test

import (
	"context"
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
	// Each waiting call: its own goroutine (16 KB), the HTTP connection's two and the fake
	// server's side of it, about 42 KB in all; before, 58 KB (OpenAI) and 52 KB (Anthropic).
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
