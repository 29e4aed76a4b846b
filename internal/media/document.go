package media

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"gateway/internal/audio"
)

// DefaultMaxDocumentText bounds the text one document puts in front of the model.
const DefaultMaxDocumentText = 100_000

// PDFTimeout bounds one pdftotext run.
const PDFTimeout = 30 * time.Second

// ErrNotText is returned by DocumentText for a file that is neither text nor PDF.
var ErrNotText = errors.New("not a text document or PDF")

// Document is a document's text, ready for the model.
type Document struct {
	Text      string
	Truncated bool // the text was cut at the bound
	Kind      string
}

// textExt are file endings read as text whatever MIME type the platform gave.
var textExt = map[string]bool{
	".txt": true, ".md": true, ".markdown": true, ".csv": true, ".tsv": true, ".json": true, ".jsonl": true,
	".yaml": true, ".yml": true, ".toml": true, ".ini": true, ".cfg": true, ".conf": true, ".log": true,
	".xml": true, ".html": true, ".htm": true, ".css": true, ".sql": true, ".sh": true, ".bash": true,
	".py": true, ".go": true, ".js": true, ".mjs": true, ".ts": true, ".tsx": true, ".jsx": true, ".java": true,
	".kt": true, ".c": true, ".h": true, ".cc": true, ".cpp": true, ".hpp": true, ".rs": true, ".rb": true,
	".php": true, ".swift": true, ".cs": true, ".lua": true, ".r": true, ".pl": true, ".scala": true,
	".tex": true, ".rst": true, ".env": true, ".diff": true, ".patch": true, ".srt": true, ".vtt": true,
}

// IsText reports whether a file of this MIME type or name is read as text.
func IsText(mime, name string) bool {
	mime = strings.ToLower(strings.TrimSpace(strings.SplitN(mime, ";", 2)[0]))
	switch {
	case strings.HasPrefix(mime, "text/"):
		return true
	case mime == "application/json", mime == "application/x-yaml", mime == "application/yaml",
		mime == "application/xml", mime == "application/javascript", mime == "application/x-sh",
		mime == "application/toml", mime == "application/sql", strings.HasSuffix(mime, "+json"),
		strings.HasSuffix(mime, "+xml"):
		return true
	}
	return textExt[strings.ToLower(filepath.Ext(name))]
}

// IsPDF reports whether a file of this MIME type or name is a PDF.
func IsPDF(mime, name string) bool {
	return strings.HasPrefix(strings.ToLower(mime), "application/pdf") || strings.EqualFold(filepath.Ext(name), ".pdf")
}

// DocumentText reads a text document (bounded to maxText bytes, cut at a rune boundary) or
// extracts a PDF's text with pdftotext (Debian's poppler-utils; argv, timeout, bounded
// output). Other files are ErrNotText. Binary data posing as text is refused.
func DocumentText(ctx context.Context, path, mime, name string, maxText int) (Document, error) {
	if maxText <= 0 {
		maxText = DefaultMaxDocumentText
	}
	switch {
	case IsPDF(mime, name):
		out, err := audio.Run(ctx, audio.Cmd{Argv: []string{"pdftotext", "-enc", "UTF-8", "-q", path, "-"}, Timeout: PDFTimeout, MaxStdout: int64(maxText)})
		truncated := errors.Is(err, audio.ErrOutputTooLarge)
		if err != nil && !truncated {
			if lerr := audio.CheckTools("pdftotext"); lerr != nil {
				return Document{}, lerr
			}
			return Document{}, fmt.Errorf("the PDF could not be read: %w", err)
		}
		text := cutRunes(string(out), maxText)
		if strings.TrimSpace(text) == "" {
			return Document{Kind: "pdf"}, errors.New("the PDF has no text layer (a scan?)")
		}
		return Document{Text: text, Truncated: truncated, Kind: "pdf"}, nil
	case IsText(mime, name):
		f, err := os.Open(path)
		if err != nil {
			return Document{}, err
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, int64(maxText)+1))
		if err != nil {
			return Document{}, err
		}
		truncated := len(b) > maxText
		text := cutRunes(string(b), maxText)
		if !utf8.ValidString(text) || strings.ContainsRune(text, 0) {
			return Document{}, errors.New("the file is not text (it holds binary data)")
		}
		return Document{Text: text, Truncated: truncated, Kind: "text"}, nil
	}
	return Document{}, ErrNotText
}

// cutRunes cuts s to at most n bytes without splitting a UTF-8 sequence.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
