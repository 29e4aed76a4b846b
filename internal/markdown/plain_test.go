package markdown

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// An answer with no Markdown in it is rendered without the parser, and exactly as the
// parser would have rendered it: random texts over an alphabet rich in what Markdown reads
// (line starts, list numbers, blank lines, trailing spaces, the inline characters) render
// byte for byte alike by both paths whenever the shortcut takes them, and the shortcut
// takes most texts of words and lines.
func TestPlainProseRendersAsTheParserDoes(t *testing.T) {
	pieces := []string{"a", "Word", "é", "Ωmega", "42", "1", "7", " ", " ", "  ", "\n", "\n", "\n\n", ".", ")", "(", "-", "+",
		"#", "=", ":", "/", "!", "?", ",", "'", "\"", "%", "\u00a0", "€", "😀", "*", "_", "`", "<", ">", "&", "~", "|", "[", "]",
		"\\", "\t", "\r", "---", "===", "http://x.y", "&amp;", "1.", "2)"}
	// Texts mostly of words and line breaks, where the shortcut is taken and its edges are.
	near := []string{"a", "Word", "é", "42", "1", " ", "  ", "\n", "\n\n", ".", ")", "!", "-", "=", "#", "'", ":"}
	rng := rand.New(rand.NewPCG(1, 17))
	plain := 0
	const texts = 60000
	for i := range texts {
		alphabet := pieces
		if i%2 == 1 {
			alphabet = near
		}
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		md := b.String()
		if !isPlainProse(md) {
			continue
		}
		plain++
		if got, want := TelegramHTML(md), telegramHTMLParsed(md); got != want {
			t.Fatalf("TelegramHTML(%q) = %q without the parser; the parser renders %q", md, got, want)
		}
	}
	t.Logf("%d of %d random texts took the shortcut", plain, texts)
	if plain < texts/10 {
		t.Errorf("only %d of %d random texts took the shortcut", plain, texts)
	}

	for _, md := range []string{"msg-a", "Sure, here it is: 42 apples (and 3 pears).\nThat's all!", "One.\n\nTwo?", "", "2024 was a year.", "Done. "} {
		if !isPlainProse(md) {
			t.Errorf("isPlainProse(%q) = false; want true", md)
		}
		if got, want := TelegramHTML(md), telegramHTMLParsed(md); got != want {
			t.Errorf("TelegramHTML(%q) = %q; the parser renders %q", md, got, want)
		}
	}
	for _, md := range []string{"**b**", "a_b_", "1. item", "2) item", "- x", " indented", "# h", "a\n===", "a  \nb", "a\n\n\nb",
		"\nx", "x & y", "a < b", "a > b", "[l](u)", "a\tb", "a\\\nb", "~~s~~", "a | b", "`c`", "a\r\nb", "\u00a0x"} {
		if isPlainProse(md) {
			t.Errorf("isPlainProse(%q) = true; want false (the parser must decide)", md)
		}
	}
}
