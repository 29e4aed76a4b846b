package markdown

import "testing"

// BenchmarkTelegramHTML is one render of a short streamed answer, as each preview does.
func BenchmarkTelegramHTML(b *testing.B) {
	const md = "Sure — here is **the answer** with `code` and a [link](https://example.com).\n\n- one\n- two\n"
	b.ReportAllocs()
	for b.Loop() {
		TelegramHTML(md)
	}
}

// BenchmarkSplitTelegramHTML is the split that follows each render, of a short answer
// that fits in one message, as nearly every preview and answer is.
func BenchmarkSplitTelegramHTML(b *testing.B) {
	html := TelegramHTML("Sure — here is **the answer** with `code` and a [link](https://example.com).\n\n- one\n- two\n")
	b.ReportAllocs()
	for b.Loop() {
		SplitTelegramHTML(html, 4096)
	}
}

// BenchmarkTelegramHTMLPlain is one render of a short answer without Markdown, as a
// preview of most short answers is.
func BenchmarkTelegramHTMLPlain(b *testing.B) {
	const md = "Sure. The train leaves at 9:40 from platform 3, and the trip takes about two hours.\nBring a jacket: it's cold there in March!"
	b.ReportAllocs()
	for b.Loop() {
		TelegramHTML(md)
	}
}
