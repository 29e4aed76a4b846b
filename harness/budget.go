package harness

import (
	"errors"
	"net/http"
	"strings"

	"gateway/internal/llm"
	"gateway/internal/media"
)

// The context budget. No tokenizer is downloaded: tokens are the provider's reported usage
// for what it saw, plus an estimate (bytes/4, and a little per message) for what came after.
const (
	// defaultContextWindow is assumed for a model nobody told us about: small enough for
	// most local models, so that compaction starts early rather than a request failing.
	defaultContextWindow = 8192
	// minContextWindow keeps a tiny configured window workable.
	minContextWindow = 1024
	// perMessageTokens is what a message costs beyond its text (role, separators).
	perMessageTokens = 6
	// maxKeepTokens bounds the recent turns kept verbatim by a compaction.
	maxKeepTokens = 32_000
)

// knownWindows are context windows of common models, matched by prefix of the model name
// (after any "vendor/" part), longest prefix first.
var knownWindows = []struct {
	prefix string
	tokens int
}{
	{"gpt-4.1", 1_047_576},
	{"gpt-4o", 128_000},
	{"gpt-4-turbo", 128_000},
	{"gpt-4", 8_192},
	{"gpt-3.5-turbo", 16_385},
	{"gpt-5", 400_000},
	{"o1", 200_000},
	{"o3", 200_000},
	{"o4", 200_000},
	{"claude", 200_000},
	{"gemini", 1_000_000},
	{"llama3.1", 128_000},
	{"llama3.2", 128_000},
	{"llama3.3", 128_000},
	{"llama-3.1", 128_000},
	{"llama-3.2", 128_000},
	{"llama-3.3", 128_000},
	{"llama3", 8_192},
	{"mistral-large", 128_000},
	{"mistral-small", 32_000},
	{"mistral", 32_768},
	{"mixtral", 32_768},
	{"qwen2.5", 32_768},
	{"qwen3", 32_768},
	{"gemma3", 128_000},
	{"gemma2", 8_192},
	{"deepseek", 64_000},
	{"phi3", 4_096},
}

// ContextWindow is the context window of a model in tokens: the configured one when set,
// else a known default for common models, else a conservative default.
func ContextWindow(model string, configured int) int {
	if configured > 0 {
		return max(configured, minContextWindow)
	}
	m := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	best, bestLen := 0, -1
	for _, k := range knownWindows {
		if strings.HasPrefix(m, k.prefix) && len(k.prefix) > bestLen {
			best, bestLen = k.tokens, len(k.prefix)
		}
	}
	if bestLen < 0 {
		return defaultContextWindow
	}
	return best
}

// budget is what one session may send.
type budget struct {
	window    int // the model's context window
	threshold int // compact when a request would pass this
	keep      int // recent tokens a compaction keeps verbatim
	summary   int // max tokens of a summary
}

func newBudget(window, maxTokens int) budget {
	// Room for the answer: the configured max_tokens, at least a fifth of the window, at
	// most half of it.
	reserve := max(window/5, min(maxTokens, window/2))
	return budget{
		window:    window,
		threshold: window - reserve,
		keep:      min(window/4, maxKeepTokens),
		summary:   min(max(window/8, 256), 4096),
	}
}

// estimateText is the token estimate of a text.
func estimateText(s string) int { return (len(s) + 3) / 4 }

// estimateMessage is the token estimate of one message, its media as c counts them.
func estimateMessage(m llm.Message, c mediaCost) int {
	n := len(m.Content) + len(m.ToolCallID) + len(m.Name)
	for _, tc := range m.ToolCalls {
		n += len(tc.ID) + len(tc.Name) + len(tc.Arguments) + 16
	}
	return (n+3)/4 + perMessageTokens + c.parts(m.Parts)
}

// What media cost in a request. Without them a chat of photos or PDFs looked small until
// the provider refused it as too long.
const (
	// imageTokens is one image as it is sent. Both providers count less for it: OpenAI's
	// high detail is 85 + 170 per 512-px tile, at most 1445 at the 2048×768 it is scaled
	// to; Anthropic's is width×height/750, about 1530 at the 1.15 MP it is scaled to. Local
	// vision models count fewer still. One figure, a little above both, needs no decoding.
	imageTokens = 1600
	// describedImageTokens is an image a model cannot see, named in words instead.
	describedImageTokens = 40
	// fileNoteTokens is a document's name and the markers around its text, or the note that
	// names a file whose contents cannot be shown.
	fileNoteTokens = 40
)

// mediaCost is how the media of a message are counted in the requests of one session.
// The zero value counts images as sent and documents up to media.DefaultMaxDocumentText.
type mediaCost struct {
	image    int // tokens of one image
	docBytes int // the text the documents of one message may bring (documentBytes)
}

func newMediaCost(b budget, textOnly bool) mediaCost {
	c := mediaCost{image: imageTokens, docBytes: documentBytes(b)}
	if textOnly {
		c.image = describedImageTokens
	}
	return c
}

// parts estimates media parts as the media provider sends them (mediaProvider.prepare):
// images whole, text documents and PDFs as their text, shared within docBytes, anything
// else as a note. A document's text is counted at its file's size: a text file is its
// text, and a PDF's text is rarely larger than the file (fonts, pictures and layout take
// most of it), while counting every PDF at the most it may bring would cut a chat of
// short PDFs early. One of unknown size counts as the most it may bring.
func (c mediaCost) parts(parts []llm.Part) int {
	if len(parts) == 0 {
		return 0
	}
	image, docBytes := c.image, c.docBytes
	if image <= 0 {
		image = imageTokens
	}
	if docBytes <= 0 {
		docBytes = media.DefaultMaxDocumentText
	}
	each := max(docBytes/max(countFiles(parts), 1), minDocumentText)
	n := 0
	for _, p := range parts {
		name := partName(p)
		switch {
		case p.Type == llm.PartImage:
			n += image
		case media.IsText(p.MIME, name) || media.IsPDF(p.MIME, name):
			text := each
			if p.Size > 0 {
				text = int(min(p.Size, int64(each)))
			}
			n += fileNoteTokens + (text+3)/4
		default:
			n += fileNoteTokens
		}
	}
	return n
}

// estimateFixed is what the system prompt and the tool definitions cost in every request.
func estimateFixed(system string, defs []llm.ToolDef) int {
	n := estimateText(system)
	for _, d := range defs {
		n += estimateText(d.Name) + estimateText(d.Description) + estimateText(string(d.Parameters)) + perMessageTokens
	}
	return n
}

// overflowWords are how providers say that the context is too long: OpenAI's code and
// message, Anthropic's, and the common wordings of OpenAI-compatible servers (vLLM,
// llama.cpp, Groq, OpenRouter, Mistral, LM Studio).
var overflowWords = []string{
	"context_length_exceeded",
	"maximum context length",
	"context length",
	"context window",
	"context size",
	"context limit", // Anthropic: "input length and `max_tokens` exceed context limit"
	"prompt is too long",
	"input is too long",
	"too many tokens",
	"too many input tokens",
	"reduce the length of the messages",
	"exceeds the limit",
	"exceeds the available context",
	"string_above_max_length",
}

// isOverflowText reports whether a provider's error text says the context is too long.
func isOverflowText(s string) bool {
	s = strings.ToLower(s)
	for _, w := range overflowWords {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// markOverflow sets ProviderError.Overflow on a client error whose text says the context is
// too long (the status is 400, or 413 for a too-large body).
func markOverflow(err error, texts ...string) error {
	var pe *ProviderError
	if !errors.As(err, &pe) {
		return err
	}
	if pe.Status != http.StatusBadRequest && pe.Status != http.StatusRequestEntityTooLarge && pe.Status != http.StatusUnprocessableEntity {
		return err
	}
	if pe.Status == http.StatusRequestEntityTooLarge || isOverflowText(strings.Join(append(texts, pe.Message), " ")) {
		pe.Overflow = true
	}
	return err
}

// isOverflow reports whether err is the provider saying the context is too long.
func isOverflow(err error) bool {
	var pe *ProviderError
	return errors.As(err, &pe) && pe.Overflow
}
