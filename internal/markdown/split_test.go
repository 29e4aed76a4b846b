package markdown

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSplitShortTextIsOneChunk(t *testing.T) {
	got := Split("hello", 10, nil)
	if len(got) != 1 || got[0] != "hello" {
		t.Fatalf("Split = %q", got)
	}
}

func TestSplitKeepsWordsInOrderWithinLimit(t *testing.T) {
	var b strings.Builder
	for i := range 500 {
		fmt.Fprintf(&b, "word%03d ", i)
		if i%37 == 0 {
			b.WriteString("\n")
		}
	}
	chunks := Split(b.String(), 100, nil)
	joined := strings.Join(chunks, " ")
	last := -1
	for i, c := range chunks {
		if n := utf8.RuneCountInString(c); n > 100 {
			t.Errorf("chunk %d has %d runes", i, n)
		}
	}
	for i := range 500 {
		idx := strings.Index(joined, fmt.Sprintf("word%03d", i))
		if idx <= last {
			t.Fatalf("word%03d missing or out of order", i)
		}
		last = idx
	}
}

func TestSplitNeverBreaksCodeFences(t *testing.T) {
	var b strings.Builder
	b.WriteString("Intro text.\n\n```go\n")
	for i := range 60 {
		fmt.Fprintf(&b, "fmt.Println(%d) // line %d\n", i, i)
	}
	b.WriteString("```\n\nOutro text.\n")
	chunks := Split(b.String(), 300, nil)
	if len(chunks) < 3 {
		t.Fatalf("expected several chunks, got %d", len(chunks))
	}
	for i, c := range chunks {
		if n := utf8.RuneCountInString(c); n > 300 {
			t.Errorf("chunk %d has %d runes", i, n)
		}
		if strings.Count(c, "```")%2 != 0 {
			t.Errorf("chunk %d has an unbalanced fence:\n%s", i, c)
		}
	}
	if !strings.HasPrefix(chunks[1], "```go\n") {
		t.Errorf("second chunk does not reopen the go fence: %q", chunks[1][:20])
	}
}

func TestSplitHardCutsOverlongLine(t *testing.T) {
	line := strings.Repeat("x", 250)
	chunks := Split(line, 100, nil)
	if len(chunks) != 3 || strings.Join(chunks, "") != line {
		t.Fatalf("chunks = %d, joined equal = %v", len(chunks), strings.Join(chunks, "") == line)
	}
}

func TestSplitMeasuresInGivenUnit(t *testing.T) {
	utf16 := func(s string) int {
		n := 0
		for _, r := range s {
			if r >= 0x10000 {
				n += 2
			} else {
				n++
			}
		}
		return n
	}
	text := strings.Repeat("😀", 150) // 300 UTF-16 units
	for i, c := range Split(text, 100, utf16) {
		if utf16(c) > 100 {
			t.Errorf("chunk %d measures %d", i, utf16(c))
		}
	}
}

// A chunk never ends in a code block that opens and closes at once, nor is one alone: when
// a fence would open with no room left for its content, the chunk ends before the fence
// and the next one opens it. Each case also keeps the invariants of every split.
func TestSplitMovesAFenceWithNoRoomToTheNextChunk(t *testing.T) {
	prose := func(n int) string { // n characters of words, no newline
		var b strings.Builder
		for i := 0; b.Len() < n; i++ {
			fmt.Fprintf(&b, "word%04d ", i)
		}
		return b.String()[:n]
	}
	ending := func(s string) string { return strings.TrimSpace(s[len(s)-20:]) }
	p1890, p150 := prose(1890), prose(150)
	codeLines := func(n, width int) string {
		var b strings.Builder
		for i := range n {
			line := fmt.Sprintf("print(%d)  # ", i)
			b.WriteString(line + strings.Repeat("x", width-len(line)) + "\n")
		}
		return b.String()
	}
	cases := []struct {
		name       string
		text       string
		limit      int
		firstEnds  string // chunk 0, as trimmed, ends with this
		secondOpen string // chunk 1 starts with this
	}{
		{
			name:       "prose then a python block of 100-character lines (Discord)",
			text:       p1890 + "\n\n```python\n" + codeLines(30, 100) + "```\n\nThat is all.",
			limit:      2000,
			firstEnds:  ending(p1890),
			secondOpen: "```python\nprint(0)",
		},
		{
			name:       "a code block of one 3000-character line (Discord)",
			text:       "Look:\n\n```\n" + strings.Repeat("z", 3000) + "\n```\n",
			limit:      2000,
			firstEnds:  "Look:",
			secondOpen: "```\nzzz",
		},
		{
			name:       "a code block of one 3000-character line, nothing before it (Discord)",
			text:       "```\n" + strings.Repeat("z", 3000) + "\n```",
			limit:      2000,
			secondOpen: "```\nzzz",
		},
		{
			name:       "data in a json block (Slack)",
			text:       "Here is the data:\n\n```json\n" + strings.Repeat("y", 9000),
			limit:      4000,
			firstEnds:  "Here is the data:",
			secondOpen: "```json\nyyy",
		},
		{
			name:       "blank lines between the fence and an overlong line",
			text:       p150 + "\n```sh\n\n\n" + strings.Repeat("q", 300) + "\n```",
			limit:      200,
			firstEnds:  ending(p150),
			secondOpen: "```sh\n",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			chunks := Split(tc.text, tc.limit, nil)
			checkSplit(t, tc.text, tc.limit, chunks)
			if len(chunks) < 2 {
				t.Fatalf("%d chunks; the case needs a split", len(chunks))
			}
			if tc.firstEnds != "" && !strings.HasSuffix(strings.TrimSpace(chunks[0]), tc.firstEnds) {
				t.Errorf("chunk 0 ends %q; want it to end with %q", tail(chunks[0]), tc.firstEnds)
			}
			if !strings.HasPrefix(chunks[1], tc.secondOpen) {
				t.Errorf("chunk 1 starts %q; want %q", head(chunks[1]), tc.secondOpen)
			}
		})
	}
}

// checkSplit asserts what every split must keep: each chunk within limit and not blank,
// its fences balanced, no empty code block where the source had none, and all of the
// text, in order, once the fences the splitter added are set aside.
func checkSplit(t *testing.T, text string, limit int, chunks []string) {
	t.Helper()
	for i, c := range chunks {
		if n := utf8.RuneCountInString(c); n > limit {
			t.Errorf("chunk %d has %d runes; the limit is %d", i, n, limit)
		}
		if strings.TrimSpace(c) == "" {
			t.Errorf("chunk %d is blank", i)
		}
		if strings.Count(c, "```")%2 != 0 {
			t.Errorf("chunk %d has an unbalanced fence: ...%q", i, tail(c))
		}
		if emptyFence(c) {
			t.Errorf("chunk %d ends with an empty code block: ...%q", i, tail(c))
		}
	}
	if got, want := withoutFences(strings.Join(chunks, "\n")), withoutFences(text); got != want {
		t.Errorf("the chunks hold %d characters of content; the text %d", len(got), len(want))
	}
}

// emptyFence reports whether c ends with a fence that opens and, past blank lines only,
// closes.
func emptyFence(c string) bool {
	lines := strings.Split(strings.TrimSpace(c), "\n")
	if len(lines) < 2 || strings.TrimSpace(lines[len(lines)-1]) != "```" {
		return false
	}
	for i := len(lines) - 2; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return strings.HasPrefix(l, "```")
		}
	}
	return false
}

// withoutFences is s without its fence lines and whitespace: what a reader sees of it,
// wherever the chunks were cut.
func withoutFences(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			continue
		}
		b.WriteString(strings.Join(strings.Fields(l), ""))
	}
	return b.String()
}

func tail(s string) string {
	if r := []rune(s); len(r) > 40 {
		return string(r[len(r)-40:])
	}
	return s
}

func head(s string) string {
	if r := []rune(s); len(r) > 40 {
		return string(r[:40])
	}
	return s
}

// The invariants hold at every limit for a text that mixes prose, code blocks of short
// and overlong lines, and blank lines, wherever the cuts happen to fall.
func TestSplitInvariantsAtEveryLimit(t *testing.T) {
	texts := []string{
		"Intro line one.\nIntro line two is a bit longer than the first.\n\n```go\n" +
			"func main() {\n\tfmt.Println(\"hi\")\n}\n```\n\nMiddle prose " + strings.Repeat("blah ", 40) +
			"\n\n```\n\n" + strings.Repeat("k", 230) + "\nshort\n```\nEnd.",
		"Here is the data:\n\n```json\n" + strings.Repeat("y", 900),
		"Two blocks:\n```a\none\n```\n```b\n" + strings.Repeat("two ", 60) + "\n```\n```c\n\n\n" + strings.Repeat("w", 120) + "\n\n```\n",
	}
	for i, text := range texts {
		for limit := 30; limit <= 300; limit++ {
			chunks := Split(text, limit, nil)
			checkSplit(t, text, limit, chunks)
			if t.Failed() {
				t.Fatalf("text %d at limit %d: %q", i, limit, chunks)
			}
		}
	}
}
