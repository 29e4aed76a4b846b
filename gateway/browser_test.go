package gateway

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"gateway/channels/web/webtest"
	"gateway/harness"
)

// TestBrowserChatWithTheWholeGateway drives Debian's Chromium against the gateway in-process:
// the user types, the answer streams in from the model, and the bubble ends in done.
func TestBrowserChatWithTheWholeGateway(t *testing.T) {
	e := newEnv(t)
	e.fake.Push(harness.FakeReply{Chunks: []string{"Hello ", "from ", "the ", "**gateway**."}, ChunkDelay: 150 * time.Millisecond})
	ctx := webtest.Browser(t)
	if _, err := chromedp.Run(ctx, chromedp.Steps(webtest.Open(e.url), webtest.Say("hello"))); err != nil {
		t.Fatal(err)
	}
	sawPartial := false
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !sawPartial {
		b, err := webtest.Peek(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		sawPartial = b != nil && b.State == "streaming" && strings.HasPrefix(b.Text, "Hello") && !strings.Contains(b.Text, "gateway")
		time.Sleep(20 * time.Millisecond)
	}
	b, err := webtest.Answer(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b.State != "done" || b.Text != "Hello from the gateway." || !strings.Contains(b.HTML, "<strong>gateway</strong>") {
		t.Fatalf("bubble = %+v; want the full rendered answer, done", b)
	}
	if !sawPartial {
		t.Errorf("never saw the answer while it was streaming")
	}
	frames, err := webtest.Frames(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(frames, "start") || !slices.Contains(frames, "delta") || frames[len(frames)-1] != "done" {
		t.Fatalf("page received frames %v; want start, deltas, done", frames)
	}
	if reqs := e.fake.Requests(); len(reqs) != 1 || lastUser(reqs[0]) != "hello" {
		t.Fatalf("the model saw %d requests", len(reqs))
	}
}
