package markdown

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestTelegramHTML(t *testing.T) {
	cases := []struct{ in, want string }{
		{"**bold** and *it* and ~~gone~~", "<b>bold</b> and <i>it</i> and <s>gone</s>"},
		{"a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"},
		{"`x<y`", "<code>x&lt;y</code>"},
		{"# Heading", "<b>Heading</b>"},
		{"[site](https://example.com/?a=1&b=\"2\")", `<a href="https://example.com/?a=1&amp;b=&quot;2&quot;">site</a>`},
		{"[click](javascript:alert(1))", "click"},
		{"<b>raw</b>", "&lt;b&gt;raw&lt;/b&gt;"},
		{"```python\nprint('<hi>')\n```", `<pre><code class="language-python">print('&lt;hi&gt;')</code></pre>`},
		{"```\nstill streaming <", "<pre>still streaming &lt;</pre>"},
		{"- a\n- b\n\n1. x\n2. y", "• a\n• b\n\n1. x\n2. y"},
		{"> quoted", "<blockquote>quoted</blockquote>"},
		{"one\ntwo", "one\ntwo"},
	}
	for _, c := range cases {
		if got := TelegramHTML(c.in); got != c.want {
			t.Errorf("TelegramHTML(%q) = %q; want %q", c.in, got, c.want)
		}
	}
}

func TestTelegramTextAndLen(t *testing.T) {
	h := `<b>a &amp; b</b> 😀`
	if got := TelegramText(h); got != "a & b 😀" {
		t.Errorf("TelegramText = %q", got)
	}
	// The emoji is a surrogate pair: two UTF-16 units.
	if got := TelegramLen(h); got != 8 {
		t.Errorf("TelegramLen = %d; want 8", got)
	}
	if UTF16Len("😀x") != 3 {
		t.Errorf("UTF16Len(😀x) = %d; want 3", UTF16Len("😀x"))
	}
}

// The plain-text fallback keeps each link's address after its label, unless the label is
// the address, and decodes entities, the href's too; addresses are left out, in order, once
// they would take the text past the limit the HTML was split to.
func TestTelegramPlain(t *testing.T) {
	h := TelegramHTML(`[ok](https://e.com/a?b=1&c="2") & <https://e.com/x?a&b> [me](mailto:me@e.com) <me@e.com> [**b**](tg://user?id=1)`)
	want := `ok (https://e.com/a?b=1&c="2") & https://e.com/x?a&b me (mailto:me@e.com) me@e.com b (tg://user?id=1)`
	if got := TelegramPlain(h, 4096); got != want {
		t.Errorf("TelegramPlain(%q) = %q; want %q", h, got, want)
	}
	h = `<a href="https://e.com/1">one</a> <a href="https://e.com/2">two</a>`
	if got, want := TelegramPlain(h, 30), "one (https://e.com/1) two"; got != want {
		t.Errorf("TelegramPlain within 30 units = %q; want %q", got, want)
	}
}

// balanced reports whether every tag in s is closed in order.
func balanced(s string) bool {
	var stack []string
	for _, a := range atomize(s) {
		switch {
		case a.tag == "":
		case !a.closing:
			stack = append(stack, a.tag)
		case len(stack) == 0 || stack[len(stack)-1] != a.tag:
			return false
		default:
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0
}

func TestSplitKeepsCodeBlocksAndLimit(t *testing.T) {
	var md strings.Builder
	md.WriteString("Intro paragraph.\n\n```go\n")
	for i := range 300 {
		fmt.Fprintf(&md, "line %03d: x := a < b\n", i)
	}
	md.WriteString("```\n\nAfter **the** code 😀.")
	h := TelegramHTML(md.String())
	const limit = 1000
	chunks := SplitTelegramHTML(h, limit)
	if len(chunks) < 6 {
		t.Fatalf("got %d chunks for %d units; want at least 6", len(chunks), TelegramLen(h))
	}
	var all strings.Builder
	for i, c := range chunks {
		if l := TelegramLen(c); l > limit {
			t.Errorf("chunk %d is %d units; limit %d", i, l, limit)
		}
		if !balanced(c) {
			t.Errorf("chunk %d has unbalanced tags: %q", i, c)
		}
		if i > 0 && i < len(chunks)-1 && !strings.HasPrefix(c, `<pre><code class="language-go">`) {
			t.Errorf("middle chunk %d does not reopen the code block: %.60q", i, c)
		}
		all.WriteString(TelegramText(c))
		all.WriteString("\n")
	}
	// Cuts fall on line ends inside the code: every line survives whole, in order.
	joined := all.String()
	last := -1
	for i := range 300 {
		idx := strings.Index(joined, fmt.Sprintf("line %03d: x := a < b\n", i))
		if idx < 0 || idx < last {
			t.Fatalf("code line %d missing, cut or out of order", i)
		}
		last = idx
	}
	if !strings.Contains(joined, "After the code 😀.") {
		t.Errorf("closing paragraph lost")
	}
}

func TestSplitSurrogatesAndLongWords(t *testing.T) {
	s := strings.Repeat("😀", 10) // 20 units, no blanks
	chunks := SplitTelegramHTML(s, 5)
	var got strings.Builder
	for _, c := range chunks {
		if l := TelegramLen(c); l > 5 {
			t.Errorf("chunk %q is %d units", c, l)
		}
		got.WriteString(c)
	}
	if got.String() != s {
		t.Errorf("rejoined %q; want %q (a surrogate pair was cut)", got.String(), s)
	}
	if n := len(SplitTelegramHTML("short", 4096)); n != 1 {
		t.Errorf("short text split into %d", n)
	}
	if n := len(SplitTelegramHTML("  \n ", 4096)); n != 0 {
		t.Errorf("blank text gave %d chunks", n)
	}
}

// The parser is shared: renderers run concurrently (one per streaming answer).
func TestParserSharedConcurrently(t *testing.T) {
	const md = "**bold** _it_ ~~gone~~ `code`\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- [x] done\n"
	want := TelegramHTML(md)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				if got := TelegramHTML(md); got != want {
					t.Errorf("concurrent render differs: %q, want %q", got, want)
					return
				}
				_ = Mrkdwn(md)
			}
		}()
	}
	wg.Wait()
}

// Splitting an answer that fits in one message, as nearly every preview and answer does,
// costs a few allocations, not one per tag and a regexp run per piece (17 before).
func TestSplittingAShortAnswerAllocatesLittle(t *testing.T) {
	html := TelegramHTML("Sure — here is **the answer** with `code` and a [link](https://example.com).\n\n- one\n- two\n")
	n := testing.AllocsPerRun(50, func() { SplitTelegramHTML(html, 4096) })
	if n > 5 {
		t.Errorf("%.0f allocations to split a short answer; want at most 5", n)
	}
}
