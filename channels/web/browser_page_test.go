package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"gateway/channels"
	"gateway/channels/web"
	"gateway/channels/web/webtest"
	"gateway/internal/secret"
)

// shown is a bubble as the page shows it.
type shown struct {
	Role  string `json:"role"`
	State string `json:"state"`
	Text  string `json:"text"`
	HTML  string `json:"html"`
}

const shownJS = `Array.from(document.querySelectorAll('.msg')).map((b) => {
	const t = b.querySelector('.text');
	return {role: b.dataset.role, state: b.dataset.state || '', text: t ? t.textContent : b.textContent, html: t ? t.innerHTML : ''};
})`

// waitShown polls the page until cond holds for its bubbles and returns them.
func waitShown(t *testing.T, ctx context.Context, what string, cond func([]shown) bool) []shown {
	t.Helper()
	var last []shown
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]shown](shownJS))
		if err != nil {
			t.Fatal(err)
		}
		if cond(got) {
			return got
		}
		last = got
		time.Sleep(30 * time.Millisecond)
	}
	t.Fatalf("the page never showed %s; it shows %+v", what, last)
	return nil
}

func texts(bs []shown) string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Role+":"+b.Text)
	}
	return strings.Join(out, " | ")
}

func pollJS(ctx context.Context, expr string) error {
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second)))
	return err
}

// The page asks for the web chat's token once, says so plainly when it is wrong, keeps it
// across a reload, and loads the media of answers with it.
func TestBrowserTokenAskedOnceAndKept(t *testing.T) {
	base, sink := serveAnsweringWith(t, web.Config{Enabled: true, Token: secret.Secret(webToken)},
		func(ctx context.Context, st channels.Stream, m *channels.Message) error {
			return sendAll(ctx, st, 0,
				channels.Frame{Type: channels.FrameStart},
				channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartAudio, MIME: "audio/ogg", Data: oggPayload(), Voice: true}}},
				channels.Frame{Type: channels.FrameDone, Text: "you said " + m.Text()})
		})
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#input"))); err != nil {
		t.Fatal(err)
	}
	if err := pollJS(ctx, `window.__gw.asking && document.getElementById('auth').checkVisibility()`); err != nil {
		t.Fatalf("the page did not ask for the token: %v", err)
	}
	// A wrong token: asked again, with a plain message.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#token"), "not the token"), chromedp.Click(chromedp.CSS("#authOk"))); err != nil {
		t.Fatal(err)
	}
	if err := pollJS(ctx, `window.__gw.asking && document.getElementById('authMsg').textContent.includes('not accepted')`); err != nil {
		msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('authMsg').textContent`))
		t.Fatalf("a wrong token was not answered plainly (message %q): %v", msg, err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#token"), webToken), chromedp.Click(chromedp.CSS("#authOk")), webtest.WaitOnline()); err != nil {
		t.Fatalf("the right token did not open the chat: %v", err)
	}
	if err := chromedp.Do(ctx, webtest.Say("hello")); err != nil {
		t.Fatal(err)
	}
	if m := sink.next(t); m.Text() != "hello" {
		t.Fatalf("delivered %q", m.Text())
	}
	if b, err := webtest.Answer(ctx, 0); err != nil || b.Text != "you said hello" {
		t.Fatalf("answer %+v %v", b, err)
	}
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](
		`(async () => { const a = document.querySelector('[data-role=assistant] audio'); if (!a) return 0; return (await fetch(a.src)).status; })()`,
		chromedp.EvalAwaitPromise))
	if err != nil || status != 200 {
		t.Errorf("the answer's voice note loads with status %d (%v); want 200 once the token was given", status, err)
	}

	// A reload: not asked again.
	if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#input")), webtest.WaitOnline()); err != nil {
		t.Fatalf("after a reload the chat did not open by itself: %v", err)
	}
	asking, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__gw.asking || document.getElementById('auth').checkVisibility()`))
	if err != nil || asking {
		t.Errorf("asked for the token again after a reload (%v)", err)
	}
	if err := chromedp.Do(ctx, webtest.Say("again")); err != nil {
		t.Fatal(err)
	}
	if m := sink.next(t); m.Text() != "again" {
		t.Fatalf("delivered %q after the reload", m.Text())
	}
}

// After a reload the page shows the conversation again; New chat clears it, also for the
// next reload.
func TestBrowserHistoryAfterReload(t *testing.T) {
	base, sink := serveAnswering(t, func(ctx context.Context, st channels.Stream, m *channels.Message) error {
		text := "**Hi**, you said: " + m.Text()
		if m.Text() == "/new" {
			text = "Started a new conversation."
		}
		return sendAll(ctx, st, 0, channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDelta, Text: text}, channels.Frame{Type: channels.FrameDone, Text: text})
	})
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, webtest.Open(base), webtest.Say("first")); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	if _, err := webtest.Answer(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, webtest.Say("second")); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	if _, err := webtest.Answer(ctx, 1); err != nil {
		t.Fatal(err)
	}

	if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#input")), webtest.WaitOnline()); err != nil {
		t.Fatal(err)
	}
	want := "user:first | assistant:Hi, you said: first | user:second | assistant:Hi, you said: second"
	got := waitShown(t, ctx, want, func(bs []shown) bool { return texts(bs) == want })
	if got[1].State != "done" || !strings.Contains(got[1].HTML, "<strong>Hi</strong>") {
		t.Errorf("a past answer shows as %+v; want it finished and rendered", got[1])
	}

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#new"))); err != nil {
		t.Fatal(err)
	}
	if m := sink.next(t); m.Text() != "/new" {
		t.Fatalf("New chat delivered %q", m.Text())
	}
	wantNew := "user:/new | assistant:Started a new conversation."
	waitShown(t, ctx, wantNew, func(bs []shown) bool { return texts(bs) == wantNew && bs[1].State == "done" })
	if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#input")), webtest.WaitOnline()); err != nil {
		t.Fatal(err)
	}
	waitShown(t, ctx, wantNew+" after a reload", func(bs []shown) bool { return texts(bs) == wantNew })
}

// An answer that finishes while the connection is down is not left streaming: the page
// takes its end from the chat's history when it reconnects.
func TestBrowserAnswerFinishedDuringADrop(t *testing.T) {
	release := make(chan struct{})
	base, sink := serveAnswering(t, func(ctx context.Context, st channels.Stream, m *channels.Message) error {
		if err := sendAll(ctx, st, 0, channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDelta, Text: "Half an "}); err != nil {
			return err
		}
		select {
		case <-release:
		case <-ctx.Done():
			return nil
		}
		return st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "Half an answer, then the rest."})
	})
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, webtest.Open(base), webtest.Say("hi")); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	waitShown(t, ctx, "the answer streaming", func(bs []shown) bool {
		return len(bs) == 2 && bs[1].State == "streaming" && bs[1].Text == "Half an "
	})
	// Keep the page offline while the answer ends: cut every connection and refuse new ones.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__gwRealWS = window.WebSocket; window.WebSocket = function () { throw new Error('offline'); }; 0`)); err != nil {
		t.Fatal(err)
	}
	if sink.drop() == 0 {
		t.Fatal("no connection to drop")
	}
	if err := pollJS(ctx, `!window.__gw.open`); err != nil {
		t.Fatalf("the page did not notice the drop: %v", err)
	}
	close(release)
	time.Sleep(300 * time.Millisecond) // the done frame goes to no socket
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.WebSocket = window.__gwRealWS; 0`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, webtest.WaitOnline()); err != nil {
		t.Fatal(err)
	}
	got := waitShown(t, ctx, "the finished answer", func(bs []shown) bool { return len(bs) == 2 && bs[1].State == "done" })
	if got[1].Text != "Half an answer, then the rest." {
		t.Errorf("the answer shows %q; want the whole answer", got[1].Text)
	}
}

// A Stop button shows while an answer streams; it sends /stop and goes away when the answer
// ends.
func TestBrowserStopButton(t *testing.T) {
	stopped := make(chan struct{})
	base, sink := serveAnswering(t, func(ctx context.Context, st channels.Stream, m *channels.Message) error {
		if m.Text() == "/stop" {
			close(stopped)
			return st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "Stopped."})
		}
		if err := st.Send(ctx, channels.Frame{Type: channels.FrameStart}); err != nil {
			return err
		}
		for i := 0; ; i++ { // an endless answer, until the user stops it
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
	})
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, webtest.Open(base)); err != nil {
		t.Fatal(err)
	}
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('stop').hidden`))
	if err != nil || !hidden {
		t.Errorf("a Stop button shows with nothing to stop (%v)", err)
	}
	if err := chromedp.Do(ctx, webtest.Say("go on forever")); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	if err := pollJS(ctx, `!document.getElementById('stop').hidden && (document.querySelector('[data-role=assistant] .text') || {}).textContent > ''`); err != nil {
		t.Fatalf("no Stop button while the answer streams: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#stop"))); err != nil {
		t.Fatal(err)
	}
	if m := sink.next(t); m.Text() != "/stop" {
		t.Fatalf("Stop delivered %q; want /stop", m.Text())
	}
	b, err := webtest.Answer(ctx, 0)
	if err != nil || b.State != "done" || !strings.HasPrefix(b.Text, "and on") {
		t.Fatalf("the stopped answer shows as %+v (%v); want what was said so far, finished", b, err)
	}
	if err := pollJS(ctx, `document.getElementById('stop').hidden`); err != nil {
		t.Errorf("the Stop button stays after the answer ended: %v", err)
	}
}

// The page's markdown renderer, run in the browser: quotes and tables render, and nothing
// in the text becomes markup of its own.
func TestMarkdown(t *testing.T) {
	base, _ := serveAnswering(t, func(context.Context, channels.Stream, *channels.Message) error { return nil })
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, webtest.Open(base)); err != nil {
		t.Fatal(err)
	}
	const table = `<div class="table"><table>`
	cases := []struct{ in, want string }{
		{"plain **bold** and `code`", "plain <strong>bold</strong> and <code>code</code>"},
		{"1 > 0", "1 &gt; 0"},
		{"> quoted\n> more", "<blockquote>quoted\nmore</blockquote>"},
		{"before\n> q\nafter", "before<blockquote>q</blockquote>after"},
		{"text\n\n> q\n\nafter\n\nend", "text<blockquote>q</blockquote>after\n\nend"},
		{"> a\n>> b", "<blockquote>a<blockquote>b</blockquote></blockquote>"},
		{"> **x** and `y`", "<blockquote><strong>x</strong> and <code>y</code></blockquote>"},
		{"| a | b |\n|---|:-:|\n| 1 | **2** |",
			table + `<thead><tr><th>a</th><th data-align="center">b</th></tr></thead><tbody><tr><td>1</td><td data-align="center"><strong>2</strong></td></tr></tbody></table></div>`},
		{"name | n\n:-- | --:\nx | 3\n\nafter",
			table + `<thead><tr><th>name</th><th data-align="right">n</th></tr></thead><tbody><tr><td>x</td><td data-align="right">3</td></tr></tbody></table></div>after`},
		{"| x | y |\n|---|---|\n| `a|b` | c \\| d |",
			table + `<thead><tr><th>x</th><th>y</th></tr></thead><tbody><tr><td><code>a|b</code></td><td>c | d</td></tr></tbody></table></div>`},
		{"| a | b |\n|---|---|\n| only |",
			table + `<thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>only</td><td></td></tr></tbody></table></div>`},
		// While streaming: a header without its full delimiter row is still text.
		{"| a | b |\n|--", "| a | b |\n|--"},
		{"a | b", "a | b"},
		// Hostile text stays text.
		{"> <img src=x onerror=alert(1)>", "<blockquote>&lt;img src=x onerror=alert(1)&gt;</blockquote>"},
		{"| <script>alert(1)</script> | [x](javascript:alert(1)) |\n|---|---|\n| \" onmouseover=\"alert(1) | ok |",
			table + `<thead><tr><th>&lt;script&gt;alert(1)&lt;/script&gt;</th><th>[x](javascript:alert(1))</th></tr></thead><tbody><tr><td>&quot; onmouseover=&quot;alert(1)</td><td>ok</td></tr></tbody></table></div>`},
		{"```\n> not a quote\n| a | b |\n```", "<pre><code>&gt; not a quote\n| a | b |</code></pre>"},
		// Links as models write them: code or emphasis in the label, parentheses in the URL.
		{"Use [`fmt.Println`](https://pkg.go.dev/fmt#Println) to print.",
			`Use <a href="https://pkg.go.dev/fmt#Println" target="_blank" rel="noopener noreferrer"><code>fmt.Println</code></a> to print.`},
		{"[**docs**](https://go.dev)", `<a href="https://go.dev" target="_blank" rel="noopener noreferrer"><strong>docs</strong></a>`},
		{"See [Go](https://en.wikipedia.org/wiki/Go_(programming_language)).",
			`See <a href="https://en.wikipedia.org/wiki/Go_(programming_language)" target="_blank" rel="noopener noreferrer">Go</a>.`},
		{"(see https://en.wikipedia.org/wiki/Go_(programming_language))",
			`(see <a href="https://en.wikipedia.org/wiki/Go_(programming_language)" target="_blank" rel="noopener noreferrer">https://en.wikipedia.org/wiki/Go_(programming_language)</a>)`},
		{"(see https://go.dev).", `(see <a href="https://go.dev" target="_blank" rel="noopener noreferrer">https://go.dev</a>).`},
		// The renderer's own marks, written by the model, are nothing.
		{"a\x000\x00b `c`", "a0b <code>c</code>"},
	}
	for _, c := range cases {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.__gw.markdown(`+jsString(c.in)+`)`))
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("markdown(%q)\n got  %s\n want %s", c.in, got, c.want)
		}
	}
	// Rendered into the page, the hostile cases create no element of their own.
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`(() => {
		const d = document.createElement('div');
		d.innerHTML = window.__gw.markdown('> <img src=x onerror=alert(1)>\n\n| <b>x</b> | y |\n|---|---|\n| <svg onload=alert(1)> | z |');
		return d.querySelectorAll('img, b, svg, script, [onerror], [onload]').length;
	})()`))
	if err != nil || n != 0 {
		t.Errorf("hostile markdown created %d elements (%v)", n, err)
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`, "\r", `\r`, "<", `\x3c`)
	return "'" + r.Replace(s) + "'"
}

// Questions sent while an answer streams wait their turn; each answer shows right after
// its own question, live and after a reload.
func TestBrowserQueuedQuestionsKeepTheirAnswers(t *testing.T) {
	release := make(chan struct{})
	turns := map[string]chan struct{}{"one": make(chan struct{}), "two": make(chan struct{}), "three": make(chan struct{})}
	after := map[string]string{"two": "one", "three": "two"}
	base, sink := serveAnswering(t, func(ctx context.Context, st channels.Stream, m *channels.Message) error {
		// One turn at a time, in order, as the gateway runs a chat's queue.
		if prev, ok := after[m.Text()]; ok {
			select {
			case <-turns[prev]:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		defer close(turns[m.Text()])
		text := "you said: " + m.Text()
		if err := sendAll(ctx, st, 0, channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDelta, Text: text}); err != nil {
			return err
		}
		if m.Text() == "one" {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: text})
	})
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, webtest.Open(base), webtest.Say("one")); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	waitShown(t, ctx, "the first answer streaming", func(bs []shown) bool { return len(bs) == 2 && bs[1].Text == "you said: one" })
	for _, q := range []string{"two", "three"} {
		if err := chromedp.Do(ctx, webtest.Say(q)); err != nil {
			t.Fatal(err)
		}
		sink.next(t)
	}
	close(release)
	want := "user:one | assistant:you said: one | user:two | assistant:you said: two | user:three | assistant:you said: three"
	done := func(bs []shown) bool {
		if texts(bs) != want {
			return false
		}
		for _, b := range bs {
			if b.Role == "assistant" && b.State != "done" {
				return false
			}
		}
		return true
	}
	waitShown(t, ctx, want, done)
	if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#input")), webtest.WaitOnline()); err != nil {
		t.Fatal(err)
	}
	waitShown(t, ctx, want+" after a reload", done)
}

// Two tabs on one chat: what the user types in one shows in the other as the user's
// message, above its answer, and /new from one starts the other over too.
func TestBrowserSecondTabShowsTheQuestion(t *testing.T) {
	base, sink := serveAnswering(t, func(ctx context.Context, st channels.Stream, m *channels.Message) error {
		text := "you said: " + m.Text()
		if m.Text() == "/new" {
			text = "Started a new conversation."
		}
		return sendAll(ctx, st, 0, channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDone, Text: text})
	})
	first := webtest.Browser(t)
	if err := chromedp.Do(first, webtest.Open(base)); err != nil {
		t.Fatal(err)
	}
	second, cancel := chromedp.NewContext(first) // another tab of the same browser
	defer cancel()
	if err := chromedp.Do(second, webtest.Open(base)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(first, webtest.Say("question from tab one")); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	want := "user:question from tab one | assistant:you said: question from tab one"
	got := waitShown(t, second, want+" in the second tab", func(bs []shown) bool { return texts(bs) == want && bs[1].State == "done" })
	if got[0].State != "sent" {
		t.Errorf("the second tab shows the question as %+v; want it sent", got[0])
	}

	if err := chromedp.Do(first, chromedp.Click(chromedp.CSS("#new"))); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	wantNew := "user:/new | assistant:Started a new conversation."
	waitShown(t, second, wantNew+" in the second tab", func(bs []shown) bool { return texts(bs) == wantNew })
}

// The gateway restarts while an answer streams and answers the question again once the page
// is back: the new attempt shows in the cut answer's bubble, not appended to its text.
func TestBrowserAnswerBegunAgainReplacesTheCutOne(t *testing.T) {
	cut, again := make(chan struct{}), make(chan struct{})
	base, sink := serveAnswering(t, func(ctx context.Context, st channels.Stream, m *channels.Message) error {
		if err := sendAll(ctx, st, 0, channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDelta, Text: "Cut short by a "}); err != nil {
			return err
		}
		select {
		case <-cut:
		case <-ctx.Done():
			return nil
		}
		// The answer begun again, as the gateway does for a message in its journal after a crash.
		if err := sendAll(ctx, st, 0, channels.Frame{Type: channels.FrameStart}, channels.Frame{Type: channels.FrameDelta, Text: "The whole "}); err != nil {
			return err
		}
		select {
		case <-again:
		case <-ctx.Done():
			return nil
		}
		return st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "The whole answer."})
	})
	ctx := webtest.Browser(t)
	if err := chromedp.Do(ctx, webtest.Open(base), webtest.Say("hi")); err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	waitShown(t, ctx, "the answer streaming", func(bs []shown) bool {
		return len(bs) == 2 && bs[1].State == "streaming" && bs[1].Text == "Cut short by a "
	})
	if sink.drop() == 0 {
		t.Fatal("no connection to drop")
	}
	if err := pollJS(ctx, `!window.__gw.open`); err != nil {
		t.Fatalf("the page did not notice the drop: %v", err)
	}
	if err := chromedp.Do(ctx, webtest.WaitOnline()); err != nil {
		t.Fatal(err)
	}
	close(cut)
	got := waitShown(t, ctx, "the answer begun again", func(bs []shown) bool {
		return len(bs) == 2 && strings.Contains(bs[1].Text, "The whole")
	})
	if got[1].Text != "The whole " || got[1].State != "streaming" {
		t.Errorf("while the new attempt streams the page shows %q (%s); want only the new attempt's text", got[1].Text, got[1].State)
	}
	close(again)
	got = waitShown(t, ctx, "the finished answer", func(bs []shown) bool { return len(bs) == 2 && bs[1].State == "done" })
	if got[1].Text != "The whole answer." {
		t.Errorf("the answer shows %q; want the whole answer once", got[1].Text)
	}
}
