package harness_test

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"gateway/harness"
	"gateway/harness/openaitest"
	"gateway/internal/llm"
)

// A model call waiting for the next chunk holds a small stack. With a hundred chats
// waiting on the model at once, what each waiting call's goroutine holds is most of the
// gateway's memory: encoding the request and decoding chunks with the SDK's own encoder
// and decoder had grown it to 32 KB, kept for the whole wait.
func TestOpenAIWaitingCallsHoldSmallStacks(t *testing.T) {
	srv := newOpenAIServer(t)
	p := openAI(t, srv)
	req := &harness.Request{System: "Be brief.", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello there"}}}
	// One call first: the encoders' type caches are built once per process.
	srv.Push(openaitest.Reply{Text: "warm"})
	if _, err := p.Stream(context.Background(), req, func(string) {}); err != nil {
		t.Fatal(err)
	}

	const calls = 40
	srv.SetFunc(func(openaitest.Request) openaitest.Reply {
		return openaitest.Reply{Chunks: []string{"first words"}, Hang: true}
	})
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
			t.Fatal("timed out waiting for every call's first chunk")
		}
	}
	// Each waiting call: its own goroutine (16 KB), the HTTP connection's two and the fake
	// server's side of it, about 42 KB in all (51 KB under -race); with 32 KB for the call
	// alone it was 58 KB (66 KB).
	bound := uint64(50 << 10)
	if raceBuild {
		bound = 58 << 10
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
