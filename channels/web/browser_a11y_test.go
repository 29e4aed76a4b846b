package web_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"gateway/channels"
	"gateway/channels/web"
	"gateway/channels/web/webtest"
	"gateway/internal/secret"
)

// focusJS tells where the keyboard focus is: the page's focused element, whether it is in
// the token dialog, whether the page has the focus at all (Tab past a modal dialog's last
// control goes to the browser's own controls, the address bar in a window) and whether the
// dialog shows.
const focusJS = `(() => {
	const a = document.activeElement;
	return {
		element: !a ? '' : a.id ? '#' + a.id : a.tagName.toLowerCase(),
		inDialog: !!(a && a.closest('#auth')),
		page: document.hasFocus(),
		open: document.getElementById('auth').checkVisibility(),
	};
})()`

type focus struct {
	Element  string `json:"element"`
	InDialog bool   `json:"inDialog"`
	Page     bool   `json:"page"`
	Open     bool   `json:"open"`
}

// behind tells whether the focus is on the page behind the dialog.
func (f focus) behind() bool { return f.Page && !f.InDialog }

func (f focus) String() string {
	if !f.Page {
		return "the browser's controls"
	}
	return f.Element
}

// A keyboard user asked for the token cannot wander behind the dialog: the focus starts in
// it, Tab and Shift+Tab go round inside it, Escape leaves it open and focused (without the
// token there is nothing behind it to use), and once the token is given the focus is in the
// message box.
func TestBrowserTokenDialogKeepsTheFocus(t *testing.T) {
	base, sink := serveAnsweringWith(t, web.Config{Enabled: true, Token: secret.Secret(webToken)}, echoAnswer)
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#input"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the token dialog", `window.__gw.asking`)
	now := func() focus {
		t.Helper()
		f, err := chromedp.Run(ctx, chromedp.Evaluate[focus](focusJS))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if f := now(); !f.Open || f.Element != "#token" {
		t.Fatalf("the dialog opened (showing: %v) with the focus on %q; want the token field", f.Open, f.Element)
	}
	press := func(what string, key string, opts ...chromedp.KeyOption) focus {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.KeyEvent(key, opts...)); err != nil {
			t.Fatal(err)
		}
		f := now()
		if !f.Open || f.behind() {
			t.Fatalf("after %s the focus is on %s behind the dialog (showing: %v); want it in the dialog", what, f, f.Open)
		}
		return f
	}
	// More presses than the dialog has controls: each direction goes all the way round.
	for _, dir := range []struct {
		name string
		opts []chromedp.KeyOption
	}{{"Tab", nil}, {"Shift+Tab", []chromedp.KeyOption{chromedp.KeyModifiers(chromedp.ModifierShift)}}} {
		seen := map[string]bool{}
		for i := range 6 {
			seen[press(fmt.Sprintf("%s press %d", dir.name, i+1), kb.Tab, dir.opts...).String()] = true
		}
		if !seen["#token"] || !seen["#authOk"] {
			t.Errorf("%s went round %v; want the token field and the button", dir.name, seen)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Focus(chromedp.CSS("#token"))); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if f := press(fmt.Sprintf("Escape press %d", i+1), kb.Escape); f.Element != "#token" {
			t.Errorf("Escape press %d moved the focus to %s; want it left in the token field", i+1, f)
		}
	}

	// A close request the browser does not let the page refuse (Android's back, pressed
	// twice) closes the dialog; the next key pressed (here Tab, to find the way) brings it
	// back, focused.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('auth').close(), true`)); err != nil {
		t.Fatal(err)
	}
	if f := press("Tab once the browser closed the dialog", kb.Tab); f.Element != "#token" {
		t.Errorf("a key pressed on the locked page put the focus on %s; want the token field", f)
	}

	// The token typed, then Tab to the dialog's button and Enter, as a keyboard user does.
	if err := chromedp.Do(ctx, chromedp.KeyEvent(webToken+kb.Tab)); err != nil {
		t.Fatal(err)
	}
	if f := now(); f.Element != "#authOk" {
		t.Fatalf("Tab from the token field went to %s; want the dialog's button", f)
	}
	if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Enter), webtest.WaitOnline()); err != nil {
		t.Fatalf("the token typed in the dialog did not open the chat: %v", err)
	}
	if f := now(); f.Open || f.Element != "#input" {
		t.Errorf("after the token was given the focus is on %s (dialog showing: %v); want the message box, the dialog closed", f, f.Open)
	}
	// What is typed next goes into the message box.
	if err := chromedp.Do(ctx, chromedp.KeyEvent("hi"+kb.Enter)); err != nil {
		t.Fatal(err)
	}
	if m := sink.next(t); m.Text() != "hi" {
		t.Errorf("typing right after the dialog sent %q; want hi", m.Text())
	}
}

// announcedJS records, from the moment a document is created, what a screen reader is told
// of it: the text of every node added to, and every text changed in, a live region
// (aria-live polite or assertive, or role log, status or alert) that is not aria-busy.
const announcedJS = `(() => {
	const said = window.__said = [];
	const region = (n) => {
		for (let e = n && (n.nodeType === 1 ? n : n.parentElement); e; e = e.parentElement) {
			if (e.getAttribute('aria-busy') === 'true') return false;
			const live = e.getAttribute('aria-live');
			if (live === 'off') return false;
			if (live === 'polite' || live === 'assertive' || ['log', 'status', 'alert'].includes(e.getAttribute('role'))) return true;
		}
		return false;
	};
	new MutationObserver((records) => {
		for (const r of records) {
			if (!region(r.target)) continue;
			const texts = r.type === 'characterData' ? [r.target.data] : Array.from(r.addedNodes, (n) => n.textContent);
			for (const t of texts) if (t.trim()) said.push(t.trim());
		}
	}).observe(document, {subtree: true, childList: true, characterData: true});
})()`

// recordAnnouncements has every document the tab opens from now on record announcedJS's
// window.__said.
func recordAnnouncements() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: announcedJS})
		return err
	})
}

// announced returns what the page has had announced that contains any of words.
func announced(t *testing.T, ctx context.Context, words ...string) []string {
	t.Helper()
	all, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__said`))
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(all, func(s string) bool {
		return !slices.ContainsFunc(words, func(w string) bool { return strings.Contains(s, w) })
	})
}

// A screen reader announces an answer once, whole, when it has ended (finished, failed or
// stopped), not again at every streamed word; while it streams its bubble says it is still
// being written. The chat shown as the page opens is not read out.
func TestBrowserAnswerAnnouncedOnceWhenEnded(t *testing.T) {
	const fish = "One fish, two fish, red fish, blue fish."
	release := make(chan struct{})
	base, sink := serveAnswering(t, func(ctx context.Context, st channels.Stream, m *channels.Message) error {
		switch m.Text() {
		case "fish":
			if err := sendAll(ctx, st, 0, channels.Frame{Type: channels.FrameStart},
				channels.Frame{Type: channels.FrameDelta, Text: "One fish, "}, channels.Frame{Type: channels.FrameDelta, Text: "two fish, "}); err != nil {
				return err
			}
			select {
			case <-release:
			case <-ctx.Done():
				return nil
			}
			return sendAll(ctx, st, 0, channels.Frame{Type: channels.FrameDelta, Text: "red fish, "},
				channels.Frame{Type: channels.FrameDelta, Text: "blue fish."}, channels.Frame{Type: channels.FrameDone, Text: fish})
		case "fail":
			return sendAll(ctx, st, 0, channels.Frame{Type: channels.FrameStart},
				channels.Frame{Type: channels.FrameDelta, Text: "Half an "}, channels.Frame{Type: channels.FrameError, Text: "The model is unavailable."})
		default: // stopped: the answer ends with what was streamed
			return sendAll(ctx, st, 0, channels.Frame{Type: channels.FrameStart},
				channels.Frame{Type: channels.FrameDelta, Text: "Cut "}, channels.Frame{Type: channels.FrameDelta, Text: "short"}, channels.Frame{Type: channels.FrameDone})
		}
	})
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, recordAnnouncements(), webtest.Open(base), webtest.Say("fish")); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	waitShown(t, ctx, "the answer half streamed", func(bs []shown) bool {
		return len(bs) == 2 && bs[1].State == "streaming" && bs[1].Text == "One fish, two fish, "
	})
	if got := announced(t, ctx, "fish"); len(got) > 0 {
		t.Errorf("while the answer streams the screen reader was told %q; want nothing until it ends", got)
	}
	busy, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-role=assistant]').getAttribute('aria-busy') || ''`))
	if err != nil || busy != "true" {
		t.Errorf("the streaming bubble has aria-busy %q (%v); want true", busy, err)
	}
	close(release)
	if b, err := webtest.Answer(ctx, 0); err != nil || b.Text != fish {
		t.Fatalf("the answer shows as %+v (%v)", b, err)
	}
	waitJS(t, ctx, "the answer announced", `window.__said.some((s) => s.includes('blue fish'))`)
	if got := announced(t, ctx, "fish"); !slices.Equal(got, []string{fish}) {
		t.Errorf("the screen reader was told %q of the answer; want it once, whole: %q", got, fish)
	}
	busy, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-role=assistant]').getAttribute('aria-busy') || ''`))
	if err != nil || busy == "true" {
		t.Errorf("the finished bubble has aria-busy %q (%v); want it gone", busy, err)
	}

	// A failed answer is announced by its reason, a stopped one by what it had said.
	for _, c := range []struct{ say, want, partial string }{
		{"fail", "The model is unavailable.", "Half an"},
		{"stop", "Cut short", "Cut short"},
	} {
		if err := chromedp.Do(ctx, webtest.Say(c.say)); err != nil {
			t.Fatal(err)
		}
		sink.next(t)
		waitJS(t, ctx, "the end of the answer to "+c.say+" announced", `window.__said.some((s) => s.includes(`+jsString(c.want)+`))`)
		if got := announced(t, ctx, c.want, c.partial); !slices.Equal(got, []string{c.want}) {
			t.Errorf("the screen reader was told %q of the answer to %s; want %q once", got, c.say, c.want)
		}
	}

	// After a reload the conversation shows again, silently; a new answer is announced.
	if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#input")), webtest.WaitOnline()); err != nil {
		t.Fatal(err)
	}
	waitShown(t, ctx, "the conversation after the reload", func(bs []shown) bool { return len(bs) == 6 && bs[5].State == "done" })
	if got := announced(t, ctx, "fish", "unavailable", "Cut", "fail", "stop"); len(got) > 0 {
		t.Errorf("after the reload the screen reader was told %q; want the past conversation left to read, not announced", got)
	}
	if err := chromedp.Do(ctx, webtest.Say("fish")); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	waitJS(t, ctx, "the new answer announced", `window.__said.some((s) => s.includes('blue fish'))`)
	if got := announced(t, ctx, "fish"); !slices.Equal(got, []string{fish}) {
		t.Errorf("after the reload the screen reader was told %q; want the new answer once: %q", got, fish)
	}
}
