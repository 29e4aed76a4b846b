package markdown

import "testing"

func TestDiscord(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"no table", "a | b and **bold**", "a | b and **bold**"},
		{"table", "| a | bb |\n|---|---|\n| ccc | d |", "```\na   | bb\n----+---\nccc | d\n```"},
		{"table after text, markup in cells made plain", "Here:\n| **x** | `y` |\n|:-|-:|\n| a \\| b | [c](https://c.example) |\n\nafter",
			"Here:\n```\nx     | y\n------+--\na | b | c\n```\n\nafter"},
		{"two tables", "| a |\n|---|\n| 1 |\n\ntext\n\n| b |\n|---|\n| 2 |", "```\na\n-\n1\n```\n\ntext\n\n```\nb\n-\n2\n```"},
		{"pipes in code stay", "```\n| a | b |\n|---|---|\n```", "```\n| a | b |\n|---|---|\n```"},
		{"table in a list stays", "- item\n\n  | a | b |\n  |---|---|\n  | 1 | 2 |", "- item\n\n  | a | b |\n  |---|---|\n  | 1 | 2 |"},
	}
	for _, c := range cases {
		if got := Discord(c.in); got != c.want {
			t.Errorf("%s: Discord(%q)\n = %q\nwant %q", c.name, c.in, got, c.want)
		}
	}
}

// A fence the text leaves open is closed even when the text fits one chunk, as it is when
// the text is cut: the chunk shows code as code while the answer streams.
func TestSplitClosesAFenceLeftOpen(t *testing.T) {
	for in, want := range map[string]string{
		"Try:\n```go\nx := 1\n":    "Try:\n```go\nx := 1\n```",
		"Try:\n```go\nx := 1\n```": "Try:\n```go\nx := 1\n```",
		"no code\n":                "no code\n",
	} {
		if got := Split(in, 100, nil); len(got) != 1 || got[0] != want {
			t.Errorf("Split(%q) = %q; want [%q]", in, got, want)
		}
	}
}
