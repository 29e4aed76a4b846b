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

// Compiled once; a Regexp is safe for concurrent use and never changes.
var (
	reImage    = regexp.MustCompile(`!\[([^\]]*)\]\([^)]*\)`)
	reLink     = regexp.MustCompile(`\[([^\]]+)\]\([^)]*\)`)
	reRefLink  = regexp.MustCompile(`\[([^\]]+)\]\[[^\]]*\]`)
	reAutoLink = regexp.MustCompile(`<(?:https?|mailto):[^>\s]+>`)
	reURL      = regexp.MustCompile(`\bhttps?://[^\s)>\]]+`)
	reCode     = regexp.MustCompile("`+([^`]*)`+")
	reHTML     = regexp.MustCompile(`</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>`)
	reUnder    = regexp.MustCompile(`(^|[^\p{L}\p{N}_])_+|_+([^\p{L}\p{N}_]|$)`)
	reHeading  = regexp.MustCompile(`^#{1,6}\s+`)
	reBullet   = regexp.MustCompile(`^(?:[-*+•]|\d+[.)])\s+`)
	reTableSep = regexp.MustCompile(`^\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?$`)
	reRule     = regexp.MustCompile(`^(?:(?:-\s*){3,}|(?:\*\s*){3,}|(?:_\s*){3,})$`)
	reSpaces   = regexp.MustCompile(`[ \t]+`)
)

// Speakable turns a markdown reply into text worth reading aloud: code blocks become
// "(code omitted)", links their text, bare URLs "link", and markup symbols go. Each line
// ends as a sentence, so list items and headings get a pause. When maxChars > 0 the text
// is cut at the last sentence end within maxChars.
func Speakable(md string, maxChars int) string {
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
		if reRule.MatchString(t) || reTableSep.MatchString(t) {
			continue
		}
		for strings.HasPrefix(t, ">") {
			t = strings.TrimSpace(t[1:])
		}
		t = reHeading.ReplaceAllString(t, "")
		t = reBullet.ReplaceAllString(t, "")
		t = inline(t)
		if t != "" {
			out = append(out, sentence(t))
		}
	}
	return capText(strings.Join(out, "\n"), maxChars)
}

func inline(t string) string {
	t = reImage.ReplaceAllString(t, "$1")
	t = reLink.ReplaceAllString(t, "$1")
	t = reRefLink.ReplaceAllString(t, "$1")
	t = reAutoLink.ReplaceAllString(t, "link")
	t = reURL.ReplaceAllString(t, "link")
	t = reCode.ReplaceAllString(t, "$1")
	t = reHTML.ReplaceAllString(t, "")
	t = strings.NewReplacer("**", "", "*", "", "~~", "", "\\", "").Replace(t)
	t = reUnder.ReplaceAllString(t, "$1$2")
	if strings.Contains(t, "|") { // a table row: cells read as a list
		cells := strings.FieldsFunc(t, func(r rune) bool { return r == '|' })
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		t = strings.Join(slices.DeleteFunc(cells, func(c string) bool { return c == "" }), ", ")
	}
	return strings.TrimSpace(reSpaces.ReplaceAllString(t, " "))
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
