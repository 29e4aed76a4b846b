// Package webtest drives the web chat page in a real headless Chromium for tests.
package webtest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"gateway/channels"
)

// Chromium is Debian's browser, the one the tests drive.
const Chromium = "/usr/bin/chromium"

// Timeout bounds everything a test does in one browser.
const Timeout = 60 * time.Second

// Browser starts a headless Chromium for t (flags fit for a small CI machine, a fresh
// profile) and returns a chromedp context for one tab, valid for Timeout. The browser stops
// at t's cleanup. Without Chromium the test is skipped, except under CI=true where that is a
// failure. Page exceptions and console errors are logged to t.
func Browser(t testing.TB, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	if _, err := os.Stat(Chromium); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chromium is required under CI: %v (apt-get install chromium)", err)
		}
		t.Skipf("no browser: %v", err)
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(Chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(420, 800), // a phone-sized window: the page must work there
	)
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)

	// Log what the page reports, but never after the test has ended.
	var mu sync.Mutex
	ended := false
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			t.Logf(format, args...)
		}
	}
	t.Cleanup(func() {
		mu.Lock()
		ended = true
		mu.Unlock()
		cancelBrowser()
		cancelAlloc()
	})
	if err := chromedp.Listen(bctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			logf("browser: exception: %s", msg)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				logf("browser: console.%s: %s", ev.Type, strings.Join(parts, " "))
			}
		}
	}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, Timeout)
	t.Cleanup(cancel)
	return ctx
}

// FakeMicrophone makes getUserMedia succeed without a prompt, with Chromium's fake device
// (a beep), or the given WAV file when wav is not "".
func FakeMicrophone(wav string) []chromedp.ExecAllocatorOption {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.Flag("use-fake-ui-for-media-stream", true),
		chromedp.Flag("use-fake-device-for-media-stream", true),
		chromedp.Flag("autoplay-policy", "no-user-gesture-required"),
	}
	if wav != "" {
		opts = append(opts, chromedp.Flag("use-file-for-fake-audio-capture", wav))
	}
	return opts
}

// Serve serves ch's routes on 127.0.0.1 until t's cleanup and returns the base URL
// (http://127.0.0.1:PORT, no trailing slash).
func Serve(t testing.TB, ch channels.HTTPChannel) string {
	t.Helper()
	mux := http.NewServeMux()
	ch.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// Open loads the chat page at base and waits until its socket is ready.
func Open(base string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("#input")),
		WaitOnline(),
	)
}

// WaitOnline waits until the page's WebSocket is open and greeted.
func WaitOnline() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Poll[bool](`window.__gw && window.__gw.open`, chromedp.WithPollingInterval(20*time.Millisecond))(ctx, t)
		return err
	})
}

// Say types text into the input and clicks send, as a user would.
func Say(text string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.SendKeys(chromedp.CSS("#input"), text),
		chromedp.Click(chromedp.CSS("#send")),
	)
}

// Bubble is an assistant bubble as the page shows it.
type Bubble struct {
	State string `json:"state"` // streaming, done or error
	Text  string `json:"text"`
	HTML  string `json:"html"`
}

// Answer waits until the n-th assistant bubble (0-based) is finished and returns it.
func Answer(ctx context.Context, n int) (Bubble, error) {
	expr := fmt.Sprintf(`(() => {
		const b = document.querySelectorAll('[data-role=assistant]')[%d];
		if (!b || b.dataset.state === 'streaming') return null;
		const t = b.querySelector('.text');
		return {state: b.dataset.state, text: t.textContent, html: t.innerHTML};
	})()`, n)
	return chromedp.Run(ctx, chromedp.Poll[Bubble](expr, chromedp.WithPollingInterval(20*time.Millisecond)))
}

// Peek returns the n-th assistant bubble now, or nil when there is none yet.
func Peek(ctx context.Context, n int) (*Bubble, error) {
	expr := fmt.Sprintf(`(() => {
		const b = document.querySelectorAll('[data-role=assistant]')[%d];
		if (!b) return null;
		const t = b.querySelector('.text');
		return {state: b.dataset.state, text: t.textContent, html: t.innerHTML};
	})()`, n)
	return chromedp.Run(ctx, chromedp.Evaluate[*Bubble](expr))
}

// Frames returns the types of the frames the page received, in order.
func Frames(ctx context.Context) ([]string, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__gw.frames.slice()`))
}
