package tts_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"gateway/builtins/tts"
)

func TestSpeakable(t *testing.T) {
	cases := []struct{ in, want string }{
		{"Hello world", "Hello world."},
		{"Is it **bold** or *italic* or __under__ or ~~gone~~?", "Is it bold or italic or under or gone?"},
		{"# Title\n\nSome text.", "Title.\nSome text."},
		{"See [the docs](https://x.org/a_b) and ![a cat](cat.png).", "See the docs and a cat."},
		{"Visit https://example.com/path?q=1 now", "Visit link now."},
		{"Run `make test` first.", "Run make test first."},
		{"Before:\n```go\nfunc main() {}\n```\nAfter.", "Before:\n(code omitted).\nAfter."},
		{"~~~\ncode\n~~~", "(code omitted)."},
		{"````md\n```\nnested\n```\n````\nDone.", "(code omitted).\nDone."},
		{"- apples\n- pears\n1. first\n2) second", "apples.\npears.\nfirst.\nsecond."},
		{"> quoted words", "quoted words."},
		{"| Name | Age |\n|---|---:|\n| Ann | 30 |", "Name, Age.\nAnn, 30."},
		{"snake_case_name stays", "snake_case_name stays."},
		{"a<br/>b <b>bold</b>", "ab bold."},
		{"***", ""},
		{"Great 🎉", "Great 🎉"},
	}
	sp := tts.NewSpeaker()
	for _, c := range cases {
		if got := sp.Speakable(c.in, 0); got != c.want {
			t.Errorf("Speakable(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

func TestSpeakableCaps(t *testing.T) {
	text := "First sentence here. Second one is here too! Third? " + strings.Repeat("word ", 50)
	sp := tts.NewSpeaker()
	got := sp.Speakable(text, 60)
	if got != "First sentence here. Second one is here too! Third?" {
		t.Errorf("cap at a sentence: %q", got)
	}
	got = sp.Speakable(strings.Repeat("word ", 100), 42)
	if utf8.RuneCountInString(got) > 42 || !strings.HasSuffix(got, "word…") {
		t.Errorf("cap without a sentence end: %q", got)
	}
	short := "Short."
	if got := sp.Speakable(short, 1000); got != short {
		t.Errorf("short text changed: %q", got)
	}
}
