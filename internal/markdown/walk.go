package markdown

import (
	"strconv"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/text"
)

// What the platform renderers share: one parser, so that every platform reads the same
// Markdown the same way, and the parts of walking its tree that do not depend on the
// platform's format.

// parser is built once: building one (goldmark.New and its block and inline parsers) cost
// more than parsing a short answer, and a streaming answer is rendered at every preview.
// goldmark's parser keeps no per-parse state (each Parse has its own context; its lazy
// set-up is a sync.Once), so one is shared by all goroutines, as goldmark's own Convert does.
var parser = goldmark.New(goldmark.WithExtensions(extension.Strikethrough, extension.Table, extension.TaskList)).Parser()

// parse parses md with the extensions every renderer handles (strikethrough, tables,
// task lists).
func parse(md string) (ast.Node, []byte) {
	src := []byte(md)
	return parser.Parse(text.NewReader(src)), src
}

// escapeAmpLtGt escapes &, < and >: what both Telegram's HTML and Slack's mrkdwn require.
func escapeAmpLtGt(s string) string {
	if !strings.ContainsAny(s, "&<>") {
		return s
	}
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// joinChildren calls fn for each child of n, writing sep between two.
func joinChildren(b *strings.Builder, n ast.Node, sep string, fn func(ast.Node)) {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		if c != n.FirstChild() {
			b.WriteString(sep)
		}
		fn(c)
	}
}

// writeList writes l's items, each on its own line (a blank line between them when the
// list is loose) as indent, its bullet or number, then its blocks rendered by block.
func writeList(b *strings.Builder, l *ast.List, indent, bullet string, block func(ast.Node)) {
	sep := "\n"
	if !l.IsTight {
		sep = "\n\n"
	}
	i := 0
	joinChildren(b, l, sep, func(item ast.Node) {
		marker := bullet
		if l.IsOrdered() {
			marker = strconv.Itoa(l.Start+i) + ". "
		}
		b.WriteString(indent + marker)
		joinChildren(b, item, "\n", block)
		i++
	})
}

// segmentsText is the source text of segs, joined.
func segmentsText(segs *text.Segments, src []byte) string {
	var s strings.Builder
	for i := 0; i < segs.Len(); i++ {
		seg := segs.At(i)
		s.Write(seg.Value(src))
	}
	return s.String()
}

// htmlBlockText is a raw HTML block's source, closing line included, to be shown as text.
func htmlBlockText(n *ast.HTMLBlock, src []byte) string {
	s := segmentsText(n.Lines(), src)
	if n.HasClosure() {
		s += string(n.ClosureLine.Value(src))
	}
	return strings.TrimRight(s, "\n")
}

// autoLinkURL is where an autolink points; a bare e-mail address gets mailto:.
func autoLinkURL(n *ast.AutoLink, src []byte) string {
	u := string(n.URL(src))
	if n.AutoLinkType == ast.AutoLinkEmail && !strings.HasPrefix(strings.ToLower(u), "mailto:") {
		u = "mailto:" + u
	}
	return u
}

// checkBox is a task list item's box.
func checkBox(n *east.TaskCheckBox) string {
	if n.IsChecked {
		return "☑ "
	}
	return "☐ "
}

// plainText is the text of n's inline descendants, without markup; textOf says what a
// text node reads as (raw or with escapes resolved), a line break reads as a space.
func plainText(n ast.Node, src []byte, textOf func(*ast.Text, []byte) string) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.WriteString(textOf(c, src))
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

// rawText is a text node's source as written.
func rawText(n *ast.Text, src []byte) string { return string(n.Value(src)) }

// alignedTable is a table as lines of cells padded to their column's width, the header
// underlined: what a platform without tables shows in a code block. Cells are plain text.
func alignedTable(t *east.Table, src []byte) string {
	var rows [][]string
	var widths []int
	header := -1
	for row := t.FirstChild(); row != nil; row = row.NextSibling() {
		var cells []string
		for cell := row.FirstChild(); cell != nil; cell = cell.NextSibling() {
			c := strings.TrimSpace(plainText(cell, src, resolvedText))
			if len(cells) >= len(widths) {
				widths = append(widths, 0)
			}
			widths[len(cells)] = max(widths[len(cells)], len([]rune(c)))
			cells = append(cells, c)
		}
		if _, ok := row.(*east.TableHeader); ok {
			header = len(rows)
		}
		rows = append(rows, cells)
	}
	var out []string
	for i, cells := range rows {
		var line []string
		for j, c := range cells {
			line = append(line, c+strings.Repeat(" ", widths[j]-len([]rune(c))))
		}
		out = append(out, strings.TrimRight(strings.Join(line, " | "), " "))
		if i == header {
			var rule []string
			for _, w := range widths {
				rule = append(rule, strings.Repeat("-", w))
			}
			out = append(out, strings.Join(rule, "-+-"))
		}
	}
	return strings.Join(out, "\n")
}
