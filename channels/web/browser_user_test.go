package web_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"gateway/channels"
	"gateway/channels/web"
	"gateway/channels/web/webtest"
)

// echoAnswer answers every message with "you said: <text>".
func echoAnswer(ctx context.Context, st channels.Stream, m *channels.Message) error {
	return sendAll(ctx, st, 0, channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDone, Text: "you said: " + m.Text()})
}

// Files over the upload limit are refused before anything is sent, and what the user typed
// and attached stays where it was: they take the large file out and send again.
func TestBrowserTooLargeFilesKeepTheMessage(t *testing.T) {
	base, sink := serveAnsweringWith(t, web.Config{Enabled: true, MaxUploadBytes: 1000}, echoAnswer)
	dir := t.TempDir()
	big := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(big, make([]byte, 5000), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, webtest.Open(base),
		chromedp.SetUploadFiles(chromedp.CSS("#file"), []string{big}, chromedp.NodeReady),
		webtest.Say("a long explanation I typed with care")); err != nil {
		t.Fatal(err)
	}
	waitShown(t, ctx, "a notice that the file is too large, with the sizes", func(bs []shown) bool {
		return len(bs) == 1 && bs[0].Role == "notice" && bs[0].State == "error" && strings.Contains(bs[0].Text, "(5 KB); the limit is 1000 bytes")
	})
	type composer struct {
		Text string `json:"text"`
		Tray string `json:"tray"`
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[composer](`({text: document.getElementById('input').value, tray: document.getElementById('tray').hidden ? '' : document.getElementById('tray').textContent})`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Text != "a long explanation I typed with care" || got.Tray == "" {
		t.Fatalf("after the refusal the message box holds %q and the tray %q; want the typed text and the file kept", got.Text, got.Tray)
	}
	// The user takes the file out and sends the text.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#tray .chip button")), chromedp.Click(chromedp.CSS("#send"))); err != nil {
		t.Fatal(err)
	}
	if m := sink.next(t); m.Text() != "a long explanation I typed with care" || len(m.Parts) != 1 {
		t.Fatalf("delivered %q with %d parts; want the typed text alone", m.Text(), len(m.Parts))
	}
}

// Text in a right-to-left script reads right to left, in the message box and in both
// bubbles; English stays left to right.
func TestBrowserRightToLeftText(t *testing.T) {
	base, sink := serveAnswering(t, func(ctx context.Context, st channels.Stream, m *channels.Message) error {
		return sendAll(ctx, st, 0, channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDone, Text: m.Text()})
	})
	ctx := webtest.Browser(t)
	const arabic = "مرحبا، كيف حالك؟ 👋"
	if err := chromedp.Do(ctx, webtest.Open(base), chromedp.SendKeys(chromedp.CSS("#input"), arabic)); err != nil {
		t.Fatal(err)
	}
	dirInput, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.getElementById('input')).direction`))
	if err != nil || dirInput != "rtl" {
		t.Errorf("the message box lays Arabic out %q (%v); want rtl", dirInput, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#send"))); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	if _, err := webtest.Answer(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, webtest.Say("hello")); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	if _, err := webtest.Answer(ctx, 1); err != nil {
		t.Fatal(err)
	}
	dirs, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('.msg .text')).map((t) => t.textContent.slice(0, 5) + ':' + getComputedStyle(t).direction)`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"مرحبا:rtl", "مرحبا:rtl", "hello:ltr", "hello:ltr"}
	if len(dirs) != len(want) {
		t.Fatalf("bubbles %q; want %q", dirs, want)
	}
	for i := range want {
		if dirs[i] != want[i] {
			t.Errorf("bubble %d lays out as %q; want %q", i, dirs[i], want[i])
		}
	}
}

// waitJS polls expr until it is true, with a generous deadline.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the page never showed %s: %v", what, err)
	}
}

// An answer still streaming shows from its beginning in a page reloaded meanwhile and in a
// tab opened meanwhile, goes on there, and ends once in each.
func TestBrowserAnswerInProgressAfterAReload(t *testing.T) {
	more, end := make(chan struct{}), make(chan struct{})
	base, sink := serveAnswering(t, func(ctx context.Context, st channels.Stream, m *channels.Message) error {
		steps := []struct {
			wait  chan struct{}
			frame channels.Frame
		}{
			{nil, channels.Frame{Type: channels.FrameStart}},
			{nil, channels.Frame{Type: channels.FrameDelta, Text: "The **beginning**, "}},
			{more, channels.Frame{Type: channels.FrameDelta, Text: "the middle, "}},
			{end, channels.Frame{Type: channels.FrameDone, Text: "The **beginning**, the middle, the end."}},
		}
		for _, s := range steps {
			if s.wait != nil {
				select {
				case <-s.wait:
				case <-ctx.Done():
					return nil
				}
			}
			if err := st.Send(ctx, s.frame); err != nil {
				return err
			}
		}
		return nil
	})
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, webtest.Open(base), webtest.Say("tell me")); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	streamingAs := func(text string) func([]shown) bool {
		return func(bs []shown) bool {
			return len(bs) == 2 && bs[0].Text == "tell me" && bs[1].State == "streaming" && bs[1].Text == text
		}
	}
	waitShown(t, ctx, "the answer's beginning", streamingAs("The beginning, "))

	if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#input")), webtest.WaitOnline()); err != nil {
		t.Fatal(err)
	}
	got := waitShown(t, ctx, "the answer's beginning after the reload", streamingAs("The beginning, "))
	if got[1].HTML != "The <strong>beginning</strong>, " {
		t.Errorf("after the reload the answer so far renders as %q; want its markdown", got[1].HTML)
	}
	waitJS(t, ctx, "the Stop button after the reload", `!document.getElementById('stop').hidden`)

	close(more)
	waitShown(t, ctx, "the answer going on after the reload", streamingAs("The beginning, the middle, "))
	second, cancel := chromedp.NewContext(ctx) // a tab opened mid-answer
	defer cancel()
	if err := chromedp.Do(second, webtest.Open(base)); err != nil {
		t.Fatal(err)
	}
	waitShown(t, second, "the answer so far in a tab opened meanwhile", streamingAs("The beginning, the middle, "))

	close(end)
	for _, tab := range []context.Context{ctx, second} {
		waitShown(t, tab, "the finished answer, once", func(bs []shown) bool {
			return len(bs) == 2 && bs[1].State == "done" && bs[1].Text == "The beginning, the middle, the end."
		})
	}
	waitJS(t, ctx, "no Stop button once the answer ended", `document.getElementById('stop').hidden`)
}

// endlessAnswer streams until the user sends /stop, which it answers with "Stopped.".
func endlessAnswer() func(ctx context.Context, st channels.Stream, m *channels.Message) error {
	stopped := make(chan struct{})
	return func(ctx context.Context, st channels.Stream, m *channels.Message) error {
		if m.Text() == "/stop" {
			close(stopped)
			return st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "Stopped."})
		}
		if err := st.Send(ctx, channels.Frame{Type: channels.FrameStart}); err != nil {
			return err
		}
		for {
			select {
			case <-stopped:
				return st.Send(ctx, channels.Frame{Type: channels.FrameDone})
			case <-ctx.Done():
				return nil
			case <-time.After(100 * time.Millisecond):
			}
			if err := st.Send(ctx, channels.Frame{Type: channels.FrameDelta, Text: "and on "}); err != nil {
				return err
			}
		}
	}
}

// On a small phone (320 px) the message box keeps room to type while an answer streams
// and the Stop button joins the row, and nothing spills off the screen.
func TestBrowserNarrowWindowKeepsRoomToType(t *testing.T) {
	base, sink := serveAnswering(t, endlessAnswer())
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(320, 568), webtest.Open(base), webtest.Say("go on")); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	waitJS(t, ctx, "the Stop button", `!document.getElementById('stop').hidden`)
	type layout struct {
		Input  float64 `json:"input"`
		Scroll int     `json:"scroll"`
		Width  int     `json:"width"`
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[layout](`({input: document.getElementById('input').getBoundingClientRect().width,
		scroll: document.querySelector('footer').scrollWidth, width: document.documentElement.clientWidth})`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Input < 80 || got.Scroll > got.Width {
		t.Errorf("at 320 px with Stop showing the message box is %.0f px wide and the row %d px of %d; want room to type (>= 80 px) and nothing off screen", got.Input, got.Scroll, got.Width)
	}
}

// A keyboard user who stops an answer with the Stop button is not left with the focus on
// nothing when the button goes away: it returns to the message box.
func TestBrowserStopByKeyboardKeepsFocus(t *testing.T) {
	base, sink := serveAnswering(t, endlessAnswer())
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, webtest.Open(base), webtest.Say("go on")); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	waitJS(t, ctx, "the Stop button", `!document.getElementById('stop').hidden`)
	if err := chromedp.Do(ctx, chromedp.Focus(chromedp.CSS("#stop")), chromedp.KeyEvent(" ")); err != nil {
		t.Fatal(err)
	}
	if m := sink.next(t); m.Text() != "/stop" {
		t.Fatalf("the Stop button sent %q; want /stop", m.Text())
	}
	waitJS(t, ctx, "the Stop button gone", `document.getElementById('stop').hidden`)
	focused, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement ? document.activeElement.id || document.activeElement.tagName : ''`))
	if err != nil || focused != "input" {
		t.Errorf("after stopping by keyboard the focus is on %q (%v); want the message box", focused, err)
	}
}

// A message over the text limit is refused before it leaves the page, with the text kept
// in the message box to shorten, rather than sent, refused, and gone from the box.
func TestBrowserTooLongMessageStaysInTheBox(t *testing.T) {
	base, sink := serveAnswering(t, echoAnswer)
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, webtest.Open(base)); err != nil {
		t.Fatal(err)
	}
	// Typing 70,000 characters key by key takes minutes; a paste puts them in at once.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		const i = document.getElementById('input');
		i.value = 'é'.repeat(40000); // 80,000 UTF-8 bytes
		i.dispatchEvent(new Event('input'));
		return true;
	})()`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#send"))); err != nil {
		t.Fatal(err)
	}
	got := waitShown(t, ctx, "a notice that the message is too long", func(bs []shown) bool { return len(bs) > 0 })
	if len(got) != 1 || got[0].Role != "notice" || !strings.Contains(got[0].Text, "too long") {
		t.Fatalf("the page shows %.200s; want only a notice that the message is too long", texts(got))
	}
	kept, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.getElementById('input').value.length`))
	if err != nil || kept != 40000 {
		t.Errorf("the message box holds %d characters (%v); want the 40000 typed", kept, err)
	}
	// Nothing went to the gateway: the next message it gets is the short one.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('input').value = ''; true`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, webtest.Say("short")); err != nil {
		t.Fatal(err)
	}
	if m := sink.next(t); m.Text() != "short" {
		t.Fatalf("the gateway got %.40q first; want the short message (the long one never sent)", m.Text())
	}
}
