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

// TestBrowserStopButtonAndHistoryWithTheWholeGateway: the page's Stop button really stops the
// turn in the gateway, and a reload shows the conversation again, the stopped answer included.
func TestBrowserStopButtonAndHistoryWithTheWholeGateway(t *testing.T) {
	e := newEnv(t)
	chunks := make([]string, 60)
	for i := range chunks {
		chunks[i] = "word "
	}
	e.fake.Push(harness.FakeReply{Chunks: chunks, ChunkDelay: 150 * time.Millisecond})
	ctx := webtest.Browser(t)
	if _, err := chromedp.Run(ctx, chromedp.Steps(webtest.Open(e.url), webtest.Say("tell me a long story"))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!document.getElementById('stop').hidden && (document.querySelector('[data-role=assistant] .text') || {}).textContent > ''`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("no Stop button while the answer streams: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS("#stop"))); err != nil {
		t.Fatal(err)
	}
	b, err := webtest.Answer(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b.State != "done" || !strings.HasPrefix(b.Text, "word") || len(b.Text) >= len(strings.Join(chunks, "")) {
		t.Fatalf("stopped answer = %+v; want part of it, finished", b)
	}
	notice, err := webtest.Answer(ctx, 1)
	if err != nil || notice.Text != "Stopped." {
		t.Fatalf("notice = %+v %v; want Stopped.", notice, err)
	}
	if n := len(e.fake.Requests()); n != 1 {
		t.Errorf("the model saw %d requests; /stop must not reach it", n)
	}

	if _, err := chromedp.Run(ctx, chromedp.Steps(chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#input")), webtest.WaitOnline())); err != nil {
		t.Fatal(err)
	}
	var shown []string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		shown, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('.msg')).map((m) => m.dataset.role + ':' + m.textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		if len(shown) == 4 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	slices.Sort(shown)
	want := []string{"assistant:" + b.Text, "assistant:Stopped.", "user:/stop", "user:tell me a long story"}
	slices.Sort(want) // the stopped answer and the notice may end in either order
	if !slices.Equal(shown, want) {
		t.Errorf("after a reload the page shows %q; want %q", shown, want)
	}
}
