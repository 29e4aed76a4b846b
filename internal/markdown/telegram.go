package markdown

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/text"
)

// TelegramHTML renders Markdown as the HTML subset that Telegram's Bot API accepts with
// parse_mode HTML: b, i, s, code, pre, a and blockquote, with &, < and > escaped
// everywhere else. Constructs Telegram cannot show (headings, lists, tables, images)
// become text that reads well. The output is always well-formed, whatever the input:
// an unclosed code fence simply runs to the end, as it does while an answer streams.
func TelegramHTML(md string) string {
	src := []byte(md)
	p := goldmark.New(goldmark.WithExtensions(extension.Strikethrough, extension.Table, extension.TaskList)).Parser()
	doc := p.Parse(text.NewReader(src))
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
func (r *tgRenderer) blocks(n ast.Node, sep string) {
	first := true
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		if !first {
			r.b.WriteString(sep)
		}
		first = false
		r.block(c)
	}
}

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
		var s strings.Builder
		lines := n.Lines()
		for i := 0; i < lines.Len(); i++ {
			seg := lines.At(i)
			s.Write(seg.Value(r.src))
		}
		if n.HasClosure() {
			s.Write(n.ClosureLine.Value(r.src))
		}
		r.b.WriteString(EscapeHTML(strings.TrimRight(s.String(), "\n")))
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
	var s strings.Builder
	for i := 0; i < lines.Len(); i++ {
		seg := lines.At(i)
		s.Write(seg.Value(r.src))
	}
	body := EscapeHTML(strings.TrimRight(s.String(), "\n"))
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
	sep := "\n"
	if !l.IsTight {
		sep = "\n\n"
	}
	i := 0
	for item := l.FirstChild(); item != nil; item = item.NextSibling() {
		if i > 0 {
			r.b.WriteString(sep)
		}
		marker := "• "
		if l.IsOrdered() {
			marker = strconv.Itoa(l.Start+i) + ". "
		}
		r.b.WriteString(indent + marker)
		first := true
		for c := item.FirstChild(); c != nil; c = c.NextSibling() {
			if !first {
				r.b.WriteString("\n")
			}
			first = false
			r.block(c)
		}
		i++
	}
}

func (r *tgRenderer) table(t *east.Table) {
	var rows []string
	for row := t.FirstChild(); row != nil; row = row.NextSibling() {
		var cells []string
		for cell := row.FirstChild(); cell != nil; cell = cell.NextSibling() {
			cells = append(cells, strings.TrimSpace(plainText(cell, r.src)))
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
		r.b.WriteString("<code>" + EscapeHTML(plainText(n, r.src)) + "</code>")
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
		url := string(n.URL(r.src))
		label := string(n.Label(r.src))
		if n.AutoLinkType == ast.AutoLinkEmail && !strings.HasPrefix(strings.ToLower(url), "mailto:") {
			url = "mailto:" + url
		}
		if safeURL(url) {
			fmt.Fprintf(&r.b, `<a href="%s">%s</a>`, escapeAttr(url), EscapeHTML(label))
		} else {
			r.b.WriteString(EscapeHTML(label))
		}
	case *ast.RawHTML:
		segs := n.Segments
		for i := 0; i < segs.Len(); i++ {
			seg := segs.At(i)
			r.b.WriteString(EscapeHTML(string(seg.Value(r.src))))
		}
	case *east.TaskCheckBox:
		if n.IsChecked {
			r.b.WriteString("☑ ")
		} else {
			r.b.WriteString("☐ ")
		}
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

// plainText is the text of n's inline descendants, without markup.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Value(src))
			if c.SoftLineBreak() || c.HardLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// EscapeHTML escapes the three characters Telegram's HTML parse mode requires escaped.
func EscapeHTML(s string) string {
	if !strings.ContainsAny(s, "&<>") {
		return s
	}
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

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
