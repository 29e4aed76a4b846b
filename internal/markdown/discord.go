package markdown

import (
	"strings"

	east "github.com/yuin/goldmark/extension/ast"
)

// Discord renders Markdown for Discord, which reads Markdown itself: the text stays as the
// model wrote it, except what Discord cannot show. A table (Discord has none, and shows
// its rows as pipes and dashes) becomes a code block with its columns lined up, as on
// Slack. Only tables at the top level are rewritten: one in a list or a quote stays as
// written, since its lines carry the container's markers.
func Discord(md string) string {
	if !strings.Contains(md, "|") {
		return md
	}
	doc, src := parse(md)
	var b strings.Builder
	last := 0
	for n := doc.FirstChild(); n != nil; n = n.NextSibling() {
		t, ok := n.(*east.Table)
		if !ok || t.FirstChild() == nil {
			continue
		}
		first, end := t.FirstChild().Pos(), t.LastChild().Pos()
		from, to := lineStart(src, first), lineEnd(src, end)
		if first < 0 || end < first || from < last {
			continue // positions not as expected: leave the table as written
		}
		b.Write(src[last:from])
		b.WriteString("```\n" + alignedTable(t, src) + "\n```")
		last = to
	}
	if last == 0 {
		return md
	}
	b.Write(src[last:])
	return b.String()
}

// lineStart is the start of the line holding offset i.
func lineStart(src []byte, i int) int {
	i = min(max(i, 0), len(src))
	for i > 0 && src[i-1] != '\n' {
		i--
	}
	return i
}

// lineEnd is the end of the line holding offset i, before its newline.
func lineEnd(src []byte, i int) int {
	i = min(max(i, 0), len(src))
	for i < len(src) && src[i] != '\n' {
		i++
	}
	return i
}
