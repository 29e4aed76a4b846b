package markdown

import (
	"strings"
	"testing"
)

func TestMrkdwn(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"bold", "this is **bold** text", "this is *bold* text"},
		{"bold underscores", "__bold__", "*bold*"},
		{"italic", "an *italic* word and _another_", "an _italic_ word and _another_"},
		{"bold italic", "***both***", "_*both*_"},
		{"strike", "~~gone~~", "~gone~"},
		{"link", "see [the docs](https://example.com/a?b=1&c=2)", "see <https://example.com/a?b=1&amp;c=2|the docs>"},
		{"link with pipe in label", "[a|b](https://x.y)", "<https://x.y|a¦b>"},
		{"autolink", "<https://example.com>", "<https://example.com>"},
		{"unsafe link is text", "[click](javascript:alert(1))", "click"},
		{"image", "![a cat](https://x.y/cat.png)", "<https://x.y/cat.png|a cat>"},
		{"heading", "# Title\n\nbody", "*Title*\n\nbody"},
		// Slack has no bold within bold: **x** in a bold line shows its asterisks.
		{"bold heading", "## **Setup**\n\nbody", "*Setup*\n\nbody"},
		{"heading with a bold word", "# The **new** plan", "*The new plan*"},
		{"bold within bold", "**all of *this* and __that__**", "*all of _this_ and that*"},
		// Slack reads * and _ as marks only at word edges: inside a word they would show as
		// written, so a product keeps its stars rather than turn into underscores.
		{"stars inside words", "2*3*4 = 24 and foo**bar**baz", "2*3*4 = 24 and foo**bar**baz"},
		{"star at a word's end", "a*b* c", "a*b* c"},
		{"emphasis after a line break", "word\n*new line*", "word\n_new line_"},
		{"bullets", "- one\n- two\n  - nested", "• one\n• two\n    ◦ nested"},
		{"ordered", "3. c\n4. d", "3. c\n4. d"},
		{"task list", "- [x] done\n- [ ] todo", "• ☑ done\n• ☐ todo"},
		{"code span kept, escaped", "use `a < b && **c**`", "use `a &lt; b &amp;&amp; **c**`"},
		{"code block kept, escaped", "```go\nif a < b && c > d {\n\t**x**\n}\n```", "```\nif a &lt; b &amp;&amp; c &gt; d {\n\t**x**\n}\n```"},
		{"no pings from code", "`<!channel>`\n\n```\n<!here> <@U123>\n```", "`&lt;!channel&gt;`\n\n```\n&lt;!here&gt; &lt;@U123&gt;\n```"},
		{"unclosed fence", "```\nstill < code", "```\nstill &lt; code\n```"},
		{"escapes outside code", "a & b < c > d", "a &amp; b &lt; c &gt; d"},
		{"no pings", "hey <!channel> and <@U123>", "hey &lt;!channel&gt; and &lt;@U123&gt;"},
		{"markdown escapes", `not \*bold\* &amp; fine`, "not *bold* &amp; fine"},
		{"quote", "> quoted\n> more", "> quoted\n> more"},
		{"line breaks kept", "line one\nline two", "line one\nline two"},
		{"table", "| a | bb |\n|---|---|\n| ccc | d |", "```\na   | bb\n----+---\nccc | d\n```"},
		{"table escaped, aligned as shown", "| a<b | c |\n|---|---|\n| <!here> | d |", "```\na&lt;b     | c\n--------+--\n&lt;!here&gt; | d\n```"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Mrkdwn(c.in); got != c.want {
				t.Errorf("Mrkdwn(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
		})
	}
}

func TestMrkdwnThenSplitKeepsFences(t *testing.T) {
	var b strings.Builder
	b.WriteString("intro **bold**\n\n```python\n")
	for range 200 {
		b.WriteString("print('x < y')\n")
	}
	b.WriteString("```\n\nafter & done")
	chunks := Split(Mrkdwn(b.String()), 1000, nil)
	if len(chunks) < 3 {
		t.Fatalf("got %d chunks; want the long code block split", len(chunks))
	}
	for i, c := range chunks {
		if n := len([]rune(c)); n > 1000 {
			t.Errorf("chunk %d has %d runes", i, n)
		}
		if strings.Count(c, "```")%2 != 0 {
			t.Errorf("chunk %d leaves a code fence open:\n%s", i, c)
		}
	}
	if last := chunks[len(chunks)-1]; !strings.HasSuffix(last, "after &amp; done") {
		t.Errorf("last chunk %q lacks the escaped tail", last)
	}
}
