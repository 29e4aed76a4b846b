package markdown

import (
	"html"
	"regexp"
	"strings"
	"unicode/utf8"
)

// atom is one indivisible piece of Telegram HTML: a tag, an entity or one character.
type atom struct {
	raw     string
	tag     string // tag name for tags, "" for text
	ch      rune   // the visible character, for text
	units   int8   // visible UTF-16 units; 0 for tags
	closing bool
}

// atomize cuts s into atoms, in one allocation: every atom is at least one rune.
func atomize(s string) []atom {
	out := make([]atom, 0, utf8.RuneCountInString(s))
	for i := 0; i < len(s); {
		switch s[i] {
		case '<':
			if j := strings.IndexByte(s[i:], '>'); j > 0 {
				raw := s[i : i+j+1]
				name := strings.TrimPrefix(raw[1:len(raw)-1], "/")
				if k := strings.IndexAny(name, " \t\n/"); k >= 0 {
					name = name[:k]
				}
				out = append(out, atom{raw: raw, tag: strings.ToLower(name), closing: raw[1] == '/'})
				i += j + 1
				continue
			}
		case '&':
			if j := strings.IndexByte(s[i:], ';'); j > 1 && j <= 10 {
				raw := s[i : i+j+1]
				if dec := html.UnescapeString(raw); dec != raw {
					r, _ := utf8.DecodeRuneInString(dec)
					out = append(out, atom{raw: raw, units: runeUnits(r), ch: r})
					i += j + 1
					continue
				}
			}
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		out = append(out, atom{raw: s[i : i+n], units: runeUnits(r), ch: r})
		i += n
	}
	return out
}

func runeUnits(r rune) int8 {
	if r >= 0x10000 {
		return 2
	}
	return 1
}

// TelegramText is what a user sees of Telegram HTML: the text without tags, entities
// decoded.
func TelegramText(s string) string {
	var b strings.Builder
	for _, a := range atomize(s) {
		if a.tag == "" {
			b.WriteRune(a.ch)
		}
	}
	return b.String()
}

// TelegramPlain is the plain-text fallback for Telegram HTML that Telegram refused: what a
// user would have seen of it (TelegramText), with each link's address written after its
// label, "ok (https://...)", since plain text cannot hide an address behind a label and the
// address is the point of the link. Addresses are added only while the text stays within
// limit UTF-16 units (the HTML was split to fit it); the label alone is kept past that.
func TelegramPlain(s string, limit int) string {
	atoms := atomize(s)
	room := limit
	for _, a := range atoms {
		room -= int(a.units)
	}
	var b strings.Builder
	href, label := "", -1 // the open link's address and where its label starts in b
	for _, a := range atoms {
		switch {
		case a.tag == "":
			b.WriteRune(a.ch)
		case a.tag == "a" && !a.closing:
			href, label = hrefOf(a.raw), b.Len()
		case a.tag == "a" && label >= 0:
			text := strings.TrimSpace(b.String()[label:])
			if add := " (" + href + ")"; href != "" && text != href && "mailto:"+text != href && UTF16Len(add) <= room {
				b.WriteString(add)
				room -= UTF16Len(add)
			}
			href, label = "", -1
		}
	}
	return b.String()
}

// hrefOf is the decoded href attribute of an opening a tag, "" when it has none.
func hrefOf(tag string) string {
	m := hrefAttr.FindStringSubmatch(tag)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

var hrefAttr = regexp.MustCompile(`\bhref="([^"]*)"`)

// TelegramLen is the visible length of Telegram HTML in UTF-16 units, the measure of
// Telegram's 4096 limit ("after entities parsing").
func TelegramLen(s string) int {
	n := 0
	for _, a := range atomize(s) {
		n += int(a.units)
	}
	return n
}

// SplitTelegramHTML splits Telegram HTML into messages whose visible text is at most
// limit UTF-16 units. It prefers paragraph breaks, then line breaks, then spaces, and cuts
// inside a word only when a piece has no blank to cut at. A tag open at a
// cut is closed at the end of one message and opened again at the start of the next, so
// a code block cut in two stays a code block in both messages and every piece is valid.
func SplitTelegramHTML(s string, limit int) []string {
	limit = max(limit, 2) // room for one surrogate pair
	atoms := atomize(s)
	var out []string
	var stack []atom // tags open at start
	start := skipSpace(atoms, 0)
	for start < len(atoms) {
		end, units := len(atoms), 0
		var best [4]int      // best[p]: latest break of priority p (index after it), 0 if none
		var bestUnits [4]int // visible units before that break
		for i := start; i < len(atoms); i++ {
			a := atoms[i]
			if a.tag != "" {
				continue
			}
			if units+int(a.units) > limit {
				end = pickBreak(best, bestUnits, limit, i)
				break
			}
			units += int(a.units)
			p := 0
			switch a.ch {
			case '\n':
				p = 2
				if i > start && atoms[i-1].ch == '\n' && atoms[i-1].tag == "" {
					p = 3
				}
			case ' ', '\t':
				p = 1
			}
			if p > 0 {
				best[p], bestUnits[p] = i+1, units
			}
		}
		chunk, next := emit(atoms, start, end, stack)
		if chunk != "" {
			out = append(out, chunk)
		}
		stack = next
		start = skipSpace(atoms, end)
	}
	return out
}

// pickBreak chooses where to cut when atom i does not fit: the strongest break in the
// second half of the piece, else the latest break of any kind, else right before i.
func pickBreak(best, bestUnits [4]int, limit, i int) int {
	for p := 3; p >= 1; p-- {
		if best[p] > 0 && bestUnits[p] >= limit/2 {
			return best[p]
		}
	}
	latest := 0
	for p := 3; p >= 1; p-- {
		latest = max(latest, best[p])
	}
	if latest > 0 {
		return latest
	}
	return i
}

// emit renders atoms[start:end] as one message: tags open before start are reopened,
// tags still open at end are closed. It returns the message and the tags open at end.
func emit(atoms []atom, start, end int, open []atom) (string, []atom) {
	var b strings.Builder
	size := 0
	for _, a := range atoms[start:end] {
		size += len(a.raw)
	}
	for _, t := range open {
		size += len(t.raw) + len(t.tag) + 3
	}
	b.Grow(size)
	for _, t := range open {
		b.WriteString(t.raw)
	}
	stack := append(make([]atom, 0, len(open)+4), open...)
	// Trailing blanks are dropped: Telegram trims them and they would only use up the limit.
	last := end
	for last > start && atoms[last-1].tag == "" && isSpace(atoms[last-1].ch) {
		last--
	}
	visible := 0
	for i := start; i < end; i++ {
		a := atoms[i]
		switch {
		case a.tag != "" && !a.closing:
			stack = append(stack, a)
		case a.tag != "":
			for j := len(stack) - 1; j >= 0; j-- {
				if stack[j].tag == a.tag {
					stack = append(stack[:j], stack[j+1:]...)
					break
				}
			}
		case i >= last:
			continue // a trailing blank
		default:
			visible += int(a.units)
		}
		b.WriteString(a.raw)
	}
	if visible == 0 {
		return "", stack
	}
	for j := len(stack) - 1; j >= 0; j-- {
		b.WriteString("</")
		b.WriteString(stack[j].tag)
		b.WriteByte('>')
	}
	return dropEmptyTags(b.String()), stack
}

var emptyTag = regexp.MustCompile(`<(b|strong|i|em|u|ins|s|strike|del|code|pre|a|blockquote|tg-spoiler|span)(\s[^>]*)?></([a-z-]+)>`)

// dropEmptyTags removes pairs like <b></b> that a cut can leave behind: Telegram would
// refuse an empty entity.
func dropEmptyTags(s string) string {
	if !strings.Contains(s, "></") { // no empty pair: spare the regexp
		return s
	}
	for {
		n := emptyTag.ReplaceAllStringFunc(s, func(m string) string {
			sub := emptyTag.FindStringSubmatch(m)
			if sub[1] == sub[3] {
				return ""
			}
			return m
		})
		if n == s {
			return s
		}
		s = n
	}
}

func skipSpace(atoms []atom, i int) int {
	for i < len(atoms) && atoms[i].tag == "" && isSpace(atoms[i].ch) {
		i++
	}
	return i
}

func isSpace(r rune) bool { return r == ' ' || r == '\n' || r == '\t' }
