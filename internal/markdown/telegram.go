package markdown

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/yuin/goldmark/ast"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/text"
)

// TelegramHTML renders Markdown as the HTML subset that Telegram's Bot API accepts with
// parse_mode HTML: b, i, s, code, pre, a and blockquote, with &, < and > escaped
// everywhere else. Constructs Telegram cannot show (headings, lists, tables, images)
// become text that reads well. The output is always well-formed, whatever the input:
// an unclosed code fence simply runs to the end, as it does while an answer streams.
func TelegramHTML(md string) string {
	if isPlainProse(md) {
		// Nothing to parse: the render would be the text itself, trimmed (no &, < or > to
		// escape either). Most short answers are such, and the parse is most of a render's
		// cost (62 allocations and 6.5 KB for a short answer), paid at every preview.
		return strings.TrimSpace(md)
	}
	return telegramHTMLParsed(md)
}

// telegramHTMLParsed is TelegramHTML through the Markdown parser, whatever md is.
func telegramHTMLParsed(md string) string {
	doc, src := parse(md)
	r := &tgRenderer{src: src}
	r.blocks(doc, "\n\n")
	return strings.TrimSpace(r.b.String())
}

type tgRenderer struct {
	src   []byte
	b     strings.Builder
	depth int // list nesting, for indentation
}

// blocks renders the block children of n, separated by sep.
func (r *tgRenderer) blocks(n ast.Node, sep string) { joinChildren(&r.b, n, sep, r.block) }

func (r *tgRenderer) block(n ast.Node) {
	switch n := n.(type) {
	case *ast.Paragraph, *ast.TextBlock:
		r.inlines(n)
	case *ast.Heading:
		r.b.WriteString("<b>")
		r.inlines(n)
		r.b.WriteString("</b>")
	case *ast.ThematicBreak:
		r.b.WriteString("———")
	case *ast.FencedCodeBlock:
		r.code(n.Lines(), string(n.Language(r.src)))
	case *ast.CodeBlock:
		r.code(n.Lines(), "")
	case *ast.Blockquote:
		r.b.WriteString("<blockquote>")
		r.blocks(n, "\n")
		r.b.WriteString("</blockquote>")
	case *ast.List:
		r.list(n)
	case *ast.HTMLBlock:
		// Raw HTML is shown as the text it is: passing it through could break the message.
		r.b.WriteString(EscapeHTML(htmlBlockText(n, r.src)))
	case *east.Table:
		r.table(n)
	default:
		if n.Type() == ast.TypeInline {
			r.inline(n)
			return
		}
		r.blocks(n, "\n\n")
	}
}

func (r *tgRenderer) code(lines *text.Segments, lang string) {
	body := EscapeHTML(strings.TrimRight(segmentsText(lines, r.src), "\n"))
	if body == "" {
		body = " " // Telegram rejects an empty pre entity
	}
	if lang = cleanLang(lang); lang != "" {
		fmt.Fprintf(&r.b, `<pre><code class="language-%s">%s</code></pre>`, lang, body)
		return
	}
	r.b.WriteString("<pre>" + body + "</pre>")
}

// cleanLang keeps a fence's language name only when it is a plain identifier.
func cleanLang(s string) string {
	s = strings.TrimSpace(s)
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("+-_.#", c)) {
			return ""
		}
	}
	return s
}

func (r *tgRenderer) list(l *ast.List) {
	indent := strings.Repeat("   ", r.depth)
	r.depth++
	defer func() { r.depth-- }()
	writeList(&r.b, l, indent, "• ", r.block)
}

func (r *tgRenderer) table(t *east.Table) {
	var rows []string
	for row := t.FirstChild(); row != nil; row = row.NextSibling() {
		var cells []string
		for cell := row.FirstChild(); cell != nil; cell = cell.NextSibling() {
			cells = append(cells, strings.TrimSpace(plainText(cell, r.src, rawText)))
		}
		rows = append(rows, strings.Join(cells, " | "))
		if _, ok := row.(*east.TableHeader); ok {
			rows = append(rows, strings.Repeat("-", UTF16Len(rows[0])))
		}
	}
	// Telegram has no tables; monospace keeps the columns readable.
	r.b.WriteString("<pre>" + EscapeHTML(strings.Join(rows, "\n")) + "</pre>")
}

func (r *tgRenderer) inlines(n ast.Node) {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		r.inline(c)
	}
}

func (r *tgRenderer) inline(n ast.Node) {
	switch n := n.(type) {
	case *ast.Text:
		r.b.WriteString(EscapeHTML(string(n.Value(r.src))))
		if n.SoftLineBreak() || n.HardLineBreak() {
			r.b.WriteByte('\n')
		}
	case *ast.String:
		r.b.WriteString(EscapeHTML(string(n.Value)))
	case *ast.CodeSpan:
		r.b.WriteString("<code>" + EscapeHTML(plainText(n, r.src, rawText)) + "</code>")
	case *ast.Emphasis:
		tag := "i"
		if n.Level >= 2 {
			tag = "b"
		}
		r.b.WriteString("<" + tag + ">")
		r.inlines(n)
		r.b.WriteString("</" + tag + ">")
	case *east.Strikethrough:
		r.b.WriteString("<s>")
		r.inlines(n)
		r.b.WriteString("</s>")
	case *ast.Link:
		r.link(string(n.Destination), n)
	case *ast.Image:
		// Telegram cannot inline an image in text; a link to it says what it is.
		if n.FirstChild() == nil {
			r.link(string(n.Destination), nil)
			return
		}
		r.link(string(n.Destination), n)
	case *ast.AutoLink:
		label := string(n.Label(r.src))
		if url := autoLinkURL(n, r.src); safeURL(url) {
			fmt.Fprintf(&r.b, `<a href="%s">%s</a>`, escapeAttr(url), EscapeHTML(label))
		} else {
			r.b.WriteString(EscapeHTML(label))
		}
	case *ast.RawHTML:
		r.b.WriteString(EscapeHTML(segmentsText(n.Segments, r.src)))
	case *east.TaskCheckBox:
		r.b.WriteString(checkBox(n))
	default:
		r.inlines(n)
	}
}

// link renders children as a link to dest, or as plain text when dest is not a URL
// Telegram accepts (javascript: and relative links would be refused or unsafe).
func (r *tgRenderer) link(dest string, children ast.Node) {
	ok := safeURL(dest)
	if ok {
		fmt.Fprintf(&r.b, `<a href="%s">`, escapeAttr(dest))
	}
	if children != nil && children.FirstChild() != nil {
		r.inlines(children)
	} else {
		r.b.WriteString(EscapeHTML(dest))
	}
	if ok {
		r.b.WriteString("</a>")
	}
}

func safeURL(u string) bool {
	l := strings.ToLower(u)
	for _, p := range []string{"http://", "https://", "tg://", "mailto:", "ftp://"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// EscapeHTML escapes the three characters Telegram's HTML parse mode requires escaped.
func EscapeHTML(s string) string { return escapeAmpLtGt(s) }

func escapeAttr(s string) string {
	return strings.ReplaceAll(EscapeHTML(s), `"`, "&quot;")
}

// UTF16Len is the length of s in UTF-16 code units, the unit of Telegram's text limits.
func UTF16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2 // a surrogate pair
		} else {
			n++
		}
	}
	return n
}

// isPlainProse reports whether md is text in which Markdown can find nothing but
// paragraphs and line breaks, so that its render is md trimmed: no character that starts
// inline syntax or needs escaping, every line starting with a letter or digits that do not
// make a list's number, no line ending in a space (a hard break), no more than one blank
// line in a row (goldmark joins paragraphs with one), and no control character. It
// answers false whenever unsure: the parse then decides.
func isPlainProse(md string) bool {
	if !utf8.ValidString(md) {
		return false
	}
	lineStart, blank := true, 0
	for i, r := range md {
		switch {
		case r == '\n':
			if i > 0 && md[i-1] == ' ' {
				return false
			}
			if lineStart {
				if blank++; blank > 1 || i == 0 {
					return false
				}
			}
			lineStart = true
			continue
		case r < 0x20, r == 0x7f, strings.ContainsRune("\\`*_~[]<>&|", r), unicode.IsSpace(r) && r != ' ':
			return false
		}
		if lineStart {
			if !unicode.IsLetter(r) && !isListNumberSafe(md[i:]) {
				return false
			}
			lineStart, blank = false, 0
		}
	}
	return true
}

// isListNumberSafe reports whether line starts with digits that are not a list item's
// number (digits followed by "." or ")").
func isListNumberSafe(line string) bool {
	n := 0
	for n < len(line) && line[n] >= '0' && line[n] <= '9' {
		n++
	}
	return n > 0 && (n == len(line) || (line[n] != '.' && line[n] != ')'))
}
