package markdown

import (
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/yuin/goldmark/ast"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// Mrkdwn renders Markdown as Slack's mrkdwn: **bold** becomes *bold*, _italic_ stays
// _italic_, ~~strike~~ becomes ~strike~, [text](url) becomes <url|text>, headings become
// bold lines, lists get bullets, code spans and fenced blocks keep their text as written,
// and &, < and > are escaped everywhere, code included (Slack parses them in all message
// text and shows &lt; as < inside code too), so that model output cannot ping users
// (<!channel>, <@U123>) or forge links. The output is well-formed for any input: an
// unclosed fence runs to the end, as it does while an answer streams.
func Mrkdwn(md string) string {
	doc, src := parse(md)
	r := &mrkdwnRenderer{src: src}
	r.blocks(doc, "\n\n")
	return strings.TrimSpace(r.b.String())
}

// EscapeMrkdwn escapes the three characters Slack gives a meaning in message text.
func EscapeMrkdwn(s string) string { return escapeAmpLtGt(s) }

type mrkdwnRenderer struct {
	src   []byte
	b     strings.Builder
	depth int  // list nesting, for indentation
	bold  bool // inside *...*: Slack has no bold within bold, whose marks it would show
}

func (r *mrkdwnRenderer) blocks(n ast.Node, sep string) { joinChildren(&r.b, n, sep, r.block) }

func (r *mrkdwnRenderer) block(n ast.Node) {
	switch n := n.(type) {
	case *ast.Paragraph, *ast.TextBlock:
		r.inlines(n)
	case *ast.Heading:
		// Slack has no headings; a bold line reads as one.
		r.b.WriteString("*")
		r.bold = true
		r.inlines(n)
		r.bold = false
		r.b.WriteString("*")
	case *ast.ThematicBreak:
		r.b.WriteString("———")
	case *ast.FencedCodeBlock:
		r.code(n.Lines())
	case *ast.CodeBlock:
		r.code(n.Lines())
	case *ast.Blockquote:
		sub := &mrkdwnRenderer{src: r.src, depth: r.depth}
		sub.blocks(n, "\n")
		for i, line := range strings.Split(sub.b.String(), "\n") {
			if i > 0 {
				r.b.WriteByte('\n')
			}
			r.b.WriteString("> " + line)
		}
	case *ast.List:
		r.list(n)
	case *ast.HTMLBlock:
		// Raw HTML is shown as the text it is.
		r.b.WriteString(EscapeMrkdwn(htmlBlockText(n, r.src)))
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

// code writes a fenced block. The language is dropped: Slack would show it as code text.
func (r *mrkdwnRenderer) code(lines *text.Segments) {
	r.b.WriteString("```\n" + EscapeMrkdwn(strings.TrimRight(segmentsText(lines, r.src), "\n")) + "\n```")
}

func (r *mrkdwnRenderer) list(l *ast.List) {
	indent := strings.Repeat("    ", r.depth)
	bullet := "• "
	if r.depth%2 == 1 {
		bullet = "◦ "
	}
	r.depth++
	defer func() { r.depth-- }()
	writeList(&r.b, l, indent, bullet, r.block)
}

// table becomes a code block with padded columns: Slack has no tables. Cells are padded
// as read and escaped after, so that columns line up as Slack shows them.
func (r *mrkdwnRenderer) table(t *east.Table) {
	r.b.WriteString("```\n" + EscapeMrkdwn(alignedTable(t, r.src)) + "\n```")
}

func (r *mrkdwnRenderer) inlines(n ast.Node) {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		r.inline(c)
	}
}

func (r *mrkdwnRenderer) inline(n ast.Node) {
	switch n := n.(type) {
	case *ast.Text:
		r.b.WriteString(EscapeMrkdwn(resolvedText(n, r.src)))
		if n.SoftLineBreak() || n.HardLineBreak() {
			r.b.WriteByte('\n')
		}
	case *ast.String:
		r.b.WriteString(EscapeMrkdwn(string(n.Value)))
	case *ast.CodeSpan:
		var s strings.Builder
		for c := n.FirstChild(); c != nil; c = c.NextSibling() {
			if t, ok := c.(*ast.Text); ok {
				s.Write(t.Value(r.src))
			} else if t, ok := c.(*ast.String); ok {
				s.Write(t.Value)
			}
		}
		r.b.WriteString("`" + EscapeMrkdwn(s.String()) + "`")
	case *ast.Emphasis:
		mark := "_"
		switch {
		case inWord(n, r.src):
			// Slack reads marks only at a word's edges: these show as written (only * makes
			// emphasis inside a word), where _ would show as underscores (2*3*4, not 2_3_4).
			mark = strings.Repeat("*", n.Level)
		case n.Level >= 2 && r.bold:
			r.inlines(n)
			return
		case n.Level >= 2:
			mark = "*"
			r.bold = true
			defer func() { r.bold = false }()
		}
		r.b.WriteString(mark)
		r.inlines(n)
		r.b.WriteString(mark)
	case *east.Strikethrough:
		r.b.WriteString("~")
		r.inlines(n)
		r.b.WriteString("~")
	case *ast.Link:
		r.link(string(n.Destination), n)
	case *ast.Image:
		r.link(string(n.Destination), n)
	case *ast.AutoLink:
		if u := autoLinkURL(n, r.src); mrkdwnSafeURL(u) {
			r.b.WriteString("<" + mrkdwnURL(u) + ">")
		} else {
			r.b.WriteString(EscapeMrkdwn(string(n.Label(r.src))))
		}
	case *ast.RawHTML:
		r.b.WriteString(EscapeMrkdwn(segmentsText(n.Segments, r.src)))
	case *east.TaskCheckBox:
		r.b.WriteString(checkBox(n))
	default:
		r.inlines(n)
	}
}

// inWord reports whether emphasis n touches a letter or digit on either side, as in
// 2*3*4 or foo**bar**baz.
func inWord(n ast.Node, src []byte) bool {
	wordy := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }
	if t, ok := n.PreviousSibling().(*ast.Text); ok && !t.SoftLineBreak() && !t.HardLineBreak() {
		if r, _ := utf8.DecodeLastRune(t.Value(src)); wordy(r) {
			return true
		}
	}
	if t, ok := n.NextSibling().(*ast.Text); ok {
		if r, _ := utf8.DecodeRune(t.Value(src)); wordy(r) {
			return true
		}
	}
	return false
}

// link renders <url|text>, or the text alone when the URL is not one Slack should open.
func (r *mrkdwnRenderer) link(dest string, children ast.Node) {
	label := &mrkdwnRenderer{src: r.src}
	label.inlines(children)
	text := strings.ReplaceAll(label.b.String(), "|", "¦") // a | would end the label early
	text = strings.ReplaceAll(text, "\n", " ")
	if !mrkdwnSafeURL(dest) {
		r.b.WriteString(text)
		return
	}
	if text == "" {
		r.b.WriteString("<" + mrkdwnURL(dest) + ">")
		return
	}
	r.b.WriteString("<" + mrkdwnURL(dest) + "|" + text + ">")
}

func mrkdwnSafeURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	switch strings.ToLower(p.Scheme) {
	case "http", "https", "mailto", "ftp":
		return true
	}
	return false
}

// mrkdwnURL makes a URL safe inside <...|...>: & is escaped, and the characters that
// would end the link early are percent-encoded.
func mrkdwnURL(u string) string {
	return strings.NewReplacer("&", "&amp;", "<", "%3C", ">", "%3E", "|", "%7C", " ", "%20").Replace(u)
}

// resolvedText is a text node's content with Markdown escapes and entities resolved.
func resolvedText(n *ast.Text, src []byte) string {
	v := n.Value(src)
	if n.IsRaw() {
		return string(v)
	}
	return string(util.ResolveEntityNames(util.ResolveNumericReferences(util.UnescapePunctuations(v))))
}
