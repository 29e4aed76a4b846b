package web_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

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
