package config

import (
	"strings"
	"testing"
	"time"
)

type inner struct {
	Token   string        `mapstructure:"token"`
	Timeout time.Duration `mapstructure:"timeout"`
}

type embedded struct {
	AllowFrom []string `yaml:"allow_from"`
}

type sample struct {
	Name     string `yaml:"name"`
	Count    int    `yaml:"count"`
	On       bool   `yaml:"on"`
	Inner    inner  `mapstructure:"inner"`
	embedded `mapstructure:",squash"`
	Old      bool `yaml:"old"`
}

func TestDecodeKeepsDefaultsAndExpands(t *testing.T) {
	s := sample{Name: "default", Count: 7, Inner: inner{Timeout: time.Minute}}
	env := map[string]string{"TOKEN": "t0k"}
	_, errs := DecodeBytes([]byte("inner:\n  token: \"a-${TOKEN}\"\nallow_from: [1, \"2\"]\non: true\n"), &s,
		Options{File: "f.yaml", Getenv: func(k string) string { return env[k] }})
	if errs != nil {
		t.Fatal(errs)
	}
	if s.Name != "default" || s.Count != 7 || s.Inner.Timeout != time.Minute || s.Inner.Token != "a-t0k" || !s.On ||
		strings.Join(s.AllowFrom, ",") != "1,2" {
		t.Fatalf("decoded %+v", s)
	}
}

func TestDecodeErrorsCarryFileLineAndKey(t *testing.T) {
	var s sample
	_, errs := DecodeBytes([]byte("name: x\ninner:\n  tokn: a\n  timeout: soon\ncount: many\nallow_from: [\"${NOPE}\"]\nold: true\nname: y\n"), &s,
		Options{File: "f.yaml", Getenv: func(string) string { return "" }, Moved: map[string]string{"old": "inner.new"}})
	got := errs.Error()
	for _, want := range []string{
		"f.yaml:3: inner.tokn: unknown key (known: token, timeout)",
		`f.yaml:4: inner.timeout: "soon" is not a duration`,
		`f.yaml:5: count: expected a whole number, got "many"`,
		"f.yaml:6: allow_from[0]: environment variable NOPE is not set",
		"f.yaml:7: old: this key moved: write it as inner.new",
		"f.yaml:8: name: given twice",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("errors lack %q:\n%s", want, got)
		}
	}
	if len(errs) != 6 {
		t.Errorf("%d errors; want 6:\n%s", len(errs), got)
	}
	for _, e := range errs {
		if (e.Var != "") != strings.Contains(e.Msg, "environment variable") {
			t.Errorf("Var %q on %q", e.Var, e)
		}
	}
}

// TestUnclosedBracketNamesItsLine: a {...} or [...] that does not parse is reported at its
// own line (the YAML library says the line before it), and an unquoted ${VAR} in one, the
// usual cause in a config written like the README's examples, gets a hint.
func TestUnclosedBracketNamesItsLine(t *testing.T) {
	const unclosed = " (a {...} or [...] that starts here is not closed, or lacks a comma)"
	cases := []struct{ doc, want string }{
		{"state_dir: ./state\nllm: {provider: openai, api_key: ${OPENAI_API_KEY}}\n",
			`f.yaml:2: not valid YAML: did not find expected ',' or '}' (inside {...} or [...] a ${VAR} needs quotes: "${VAR}")`},
		{"a: 1\n\nb:\n  c: 1\n  d: [1, 2\ne: 3\n", "f.yaml:5: not valid YAML: did not find expected ',' or ']'" + unclosed},
		{"description: [unclosed\n", "f.yaml:1: not valid YAML: did not find expected ',' or ']'" + unclosed},
	}
	for _, c := range cases {
		_, err := Parse("f.yaml", []byte(c.doc))
		if err == nil || err.Error() != c.want {
			t.Errorf("%q: error %v; want %s", c.doc, err, c.want)
		}
	}
}

// TestSyntaxErrorNamesItsLine: a document that is not YAML is reported at the line where it
// stops being YAML, with the usual cause in words. The YAML library gives a parser error
// at the 0-based line of the collection it was in, and no line for the first one.
func TestSyntaxErrorNamesItsLine(t *testing.T) {
	cases := []struct{ doc, want string }{
		{"llm: provider: openai\n", `f.yaml:1: not valid YAML: mapping values are not allowed in this context (a key indented more than the one above it, or a value with ": " in it that needs quotes)`},
		{"a: 1\nb: 2\nllm:\n  provider: openai\n model: x\n", "f.yaml:5: not valid YAML: did not find expected key (this line is indented less than the keys above it, and more than the section they are in)"},
		{"a: [1,\n   2]\nb:\n  c: 1\n d: 2\n", "f.yaml:5: not valid YAML: did not find expected key (this line is indented less than the keys above it, and more than the section they are in)"},
		{"a: 1\nb:\n  - a\n  c: d\n", "f.yaml:4: not valid YAML: did not find expected '-' indicator (a key among the items of a list: each item starts with -)"},
		{"llm:\n\tprovider: openai\n", "f.yaml:2: not valid YAML: found character that cannot start any token (this line is indented with a tab: YAML indents with spaces)"},
		{"a: 1\nname: 'it's'\n", `f.yaml:2: not valid YAML: did not find expected key (text after a quoted value's closing quote: quote the whole value, and write a ' inside '...' as '')`},
		{"a: 1\nkey: \"sk-secret\nb: 2\n", "f.yaml:2: not valid YAML: found unexpected end of stream (a quote opened on this line is never closed)"},
	}
	for _, c := range cases {
		_, err := Parse("f.yaml", []byte(c.doc))
		if err == nil || err.Error() != c.want {
			t.Errorf("%q: error %v;\nwant %s", c.doc, err, c.want)
		}
	}
}

func TestAtFindsTheLineOfAKey(t *testing.T) {
	root, err := Parse("f.yaml", []byte("a:\n  b:\n    - x\n    - y\n"))
	if err != nil {
		t.Fatal(err)
	}
	if e := At("f.yaml", root, "a.b[1]", "bad"); e.Error() != "f.yaml:4: a.b[1]: bad" {
		t.Errorf("At = %q", e)
	}
	if e := At("f.yaml", root, "a.c", "missing"); e.Line != 2 {
		t.Errorf("At a key the file lacks: line %d; want 2, where its parent's value starts", e.Line)
	}
}
