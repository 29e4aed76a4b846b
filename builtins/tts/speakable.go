package tts

import (
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CodeOmitted is spoken in place of a code block.
const CodeOmitted = "(code omitted)"

// Speaker turns markdown into text to read aloud. Its expressions are compiled when the
// text-to-speech builtin is set up, not at the start of every process: a gateway that never
// speaks keeps none of them (about 36 KB). A Speaker is safe for concurrent use.
type Speaker struct {
	image, link, refLink, autoLink, url, code, html, under *regexp.Regexp
	heading, bullet, tableSep, rule, spaces                *regexp.Regexp
	symbols                                                *strings.Replacer
}

// NewSpeaker compiles a Speaker's expressions.
func NewSpeaker() *Speaker {
	return &Speaker{
		image:    regexp.MustCompile(`!\[([^\]]*)\]\([^)]*\)`),
		link:     regexp.MustCompile(`\[([^\]]+)\]\([^)]*\)`),
		refLink:  regexp.MustCompile(`\[([^\]]+)\]\[[^\]]*\]`),
		autoLink: regexp.MustCompile(`<(?:https?|mailto):[^>\s]+>`),
		url:      regexp.MustCompile(`\bhttps?://[^\s)>\]]+`),
		code:     regexp.MustCompile("`+([^`]*)`+"),
		html:     regexp.MustCompile(`</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>`),
		under:    regexp.MustCompile(`(^|[^\p{L}\p{N}_])_+|_+([^\p{L}\p{N}_]|$)`),
		heading:  regexp.MustCompile(`^#{1,6}\s+`),
		bullet:   regexp.MustCompile(`^(?:[-*+•]|\d+[.)])\s+`),
		tableSep: regexp.MustCompile(`^\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?$`),
		rule:     regexp.MustCompile(`^(?:(?:-\s*){3,}|(?:\*\s*){3,}|(?:_\s*){3,})$`),
		spaces:   regexp.MustCompile(`[ \t]+`),
		symbols:  strings.NewReplacer("**", "", "*", "", "~~", "", "\\", ""),
	}
}

// Speakable turns a markdown reply into text worth reading aloud: code blocks become
// "(code omitted)", links their text, bare URLs "link", and markup symbols go. Each line
// ends as a sentence, so list items and headings get a pause. When maxChars > 0 the text
// is cut at the last sentence end within maxChars.
func (sp *Speaker) Speakable(md string, maxChars int) string {
	var out []string
	fence := ""
	for line := range strings.Lines(strings.ReplaceAll(md, "\r\n", "\n")) {
		t := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			for _, c := range t[3:] { // a longer fence needs as long a closing one
				if c != rune(fence[0]) {
					break
				}
				fence += fence[:1]
			}
			out = append(out, sentence(CodeOmitted))
			continue
		}
		if sp.rule.MatchString(t) || sp.tableSep.MatchString(t) {
			continue
		}
		for strings.HasPrefix(t, ">") {
			t = strings.TrimSpace(t[1:])
		}
		t = sp.heading.ReplaceAllString(t, "")
		t = sp.bullet.ReplaceAllString(t, "")
		t = sp.inline(t)
		if t != "" {
			out = append(out, sentence(t))
		}
	}
	return capText(strings.Join(out, "\n"), maxChars)
}

func (sp *Speaker) inline(t string) string {
	t = sp.image.ReplaceAllString(t, "$1")
	t = sp.link.ReplaceAllString(t, "$1")
	t = sp.refLink.ReplaceAllString(t, "$1")
	t = sp.autoLink.ReplaceAllString(t, "link")
	t = sp.url.ReplaceAllString(t, "link")
	t = sp.code.ReplaceAllString(t, "$1")
	t = sp.html.ReplaceAllString(t, "")
	t = sp.symbols.Replace(t)
	t = sp.under.ReplaceAllString(t, "$1$2")
	if strings.Contains(t, "|") { // a table row: cells read as a list
		cells := strings.FieldsFunc(t, func(r rune) bool { return r == '|' })
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		t = strings.Join(slices.DeleteFunc(cells, func(c string) bool { return c == "" }), ", ")
	}
	return strings.TrimSpace(sp.spaces.ReplaceAllString(t, " "))
}

// sentence ends t with punctuation unless it has some, so a voice pauses after it.
func sentence(t string) string {
	r, _ := utf8.DecodeLastRuneInString(t)
	if unicode.IsPunct(r) && r != ')' && r != '"' && r != '\'' || unicode.IsSymbol(r) {
		return t
	}
	return t + "."
}

// capText cuts t to at most max runes, at the last sentence end when there is one in
// the second half, else at the last space with "…".
func capText(t string, max int) string {
	if max <= 0 || utf8.RuneCountInString(t) <= max {
		return t
	}
	runes := []rune(t)[:max]
	for i := len(runes) - 1; i >= max/2; i-- {
		if strings.ContainsRune(".!?…。！？\n", runes[i]) && (i+1 == len(runes) || unicode.IsSpace(runes[i+1]) || runes[i] == '\n') {
			return strings.TrimSpace(string(runes[:i+1]))
		}
	}
	cut := string(runes)
	if i := strings.LastIndexFunc(cut, unicode.IsSpace); i > 0 {
		cut = cut[:i]
	}
	return strings.TrimSpace(cut) + "…"
}
