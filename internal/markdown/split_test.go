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
