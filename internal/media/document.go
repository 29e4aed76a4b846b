package media

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf16"
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
		text, ok := decodeText(b[:min(len(b), maxText)], truncated)
		if !ok {
			return Document{}, errors.New("the file is not text (it holds binary data)")
		}
		if len(text) > maxText { // a byte of Windows-1252 or two of UTF-16 may take three in UTF-8
			text, truncated = cutRunes(text, maxText), true
		}
		return Document{Text: text, Truncated: truncated, Kind: "text"}, nil
	}
	return Document{}, ErrNotText
}

// decodeText returns b, the start of a text file, as UTF-8. Besides UTF-8 it reads what
// Windows programs write: UTF-16 with a byte order mark (Notepad's "Unicode", PowerShell's
// redirections) and the Windows code page 1252 (Excel's CSV in Western Europe and the
// Americas). cut says the file goes on past b: a character cut at its end is dropped. ok
// is false for binary data.
func decodeText(b []byte, cut bool) (text string, ok bool) {
	switch {
	case bytes.HasPrefix(b, []byte{0xef, 0xbb, 0xbf}):
		b = b[3:]
	case bytes.HasPrefix(b, []byte{0xff, 0xfe}), bytes.HasPrefix(b, []byte{0xfe, 0xff}):
		le := b[0] == 0xff
		b = b[2:]
		u := make([]uint16, len(b)/2)
		for i := range u {
			if le {
				u[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
			} else {
				u[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
			}
		}
		if n := len(u); cut && n > 0 && u[n-1] >= 0xd800 && u[n-1] < 0xdc00 {
			u = u[:n-1] // the first half of a pair whose second half was cut off
		}
		text = string(utf16.Decode(u))
		return text, !strings.ContainsRune(text, 0)
	}
	if cut {
		// Drop a UTF-8 sequence cut short at the end.
		for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
			if utf8.RuneStart(b[i]) {
				if !utf8.FullRune(b[i:]) {
					b = b[:i]
				}
				break
			}
		}
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return "", false
	}
	if utf8.Valid(b) {
		return string(b), true
	}
	for i := 0; i < len(b); {
		_, n := utf8.DecodeRune(b[i:])
		if n > 1 {
			// UTF-8 with a stray byte or two: keep the UTF-8 and mark what is not.
			return strings.ToValidUTF8(string(b), "\uFFFD"), true
		}
		i += n
	}
	cp1252 := [32]rune{ // 0x80–0x9F; 0: undefined
		'€', 0, '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', 0, 'Ž', 0,
		0, '‘', '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', 0, 'ž', 'Ÿ',
	}
	var out strings.Builder
	for _, c := range b {
		switch {
		case c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f', c == 0x7f:
			return "", false // a control character: binary data
		case c < 0x80:
			out.WriteByte(c)
		case c < 0xa0:
			if cp1252[c-0x80] == 0 {
				return "", false
			}
			out.WriteRune(cp1252[c-0x80])
		default:
			out.WriteRune(rune(c)) // as in Latin-1
		}
	}
	return out.String(), true
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
