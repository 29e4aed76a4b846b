package channels

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ErrTooLarge is returned by ReadPart for media over the caller's limit.
var ErrTooLarge = errors.New("too large")

// ReadPart returns a media part's bytes, from Data or its file, refusing more than max bytes
// (max <= 0: no limit) without reading them all, and a path that is not a regular file (a
// FIFO would block the read, a device never end it).
func ReadPart(p Part, max int64) ([]byte, error) {
	name := p.Name
	if name == "" && p.Path != "" {
		name = filepath.Base(p.Path)
	}
	if p.Data != nil {
		if max > 0 && int64(len(p.Data)) > max {
			return nil, fmt.Errorf("%s %s is %s: %w (the limit is %s)", p.Type, name, OverSize(int64(len(p.Data)), max), ErrTooLarge, HumanSize(max))
		}
		return p.Data, nil
	}
	if p.Path == "" {
		return nil, fmt.Errorf("a %s part has neither data nor a path", p.Type)
	}
	fi, err := os.Stat(p.Path)
	if err != nil {
		return nil, fmt.Errorf("reading a %s part: %w", p.Type, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("reading a %s part: %s is not a regular file", p.Type, p.Path)
	}
	f, err := os.Open(p.Path)
	if err != nil {
		return nil, fmt.Errorf("reading a %s part: %w", p.Type, err)
	}
	defer f.Close()
	r := io.Reader(f)
	if max > 0 {
		r = io.LimitReader(f, max+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading a %s part: %w", p.Type, err)
	}
	if max > 0 && int64(len(b)) > max {
		return nil, fmt.Errorf("%s %s is over %s: %w", p.Type, name, HumanSize(max), ErrTooLarge)
	}
	return b, nil
}

// OverSize says size, a count over limit, so that it reads as more than the limit. A limit
// of whole decimal megabytes reads so (HumanSize), and the size is then said in the same
// unit: in binary ones, 20.4 MB over a limit written 20000000 read "19 MB". A size that
// would still read as the limit is said "more than" it.
func OverSize(size, limit int64) string {
	s := HumanSize(size)
	if decimalMB(limit) && size < 1<<30 {
		s = fmt.Sprintf("%.1f MB", float64(size)/1e6)
	}
	if l := HumanSize(limit); s == l || s == strings.TrimSuffix(l, " MB")+".0 MB" {
		return "more than " + l
	}
	return s
}

// decimalMB reports whether n is a count of whole decimal megabytes HumanSize says as such.
func decimalMB(n int64) bool { return n >= 1_000_000 && n < 1<<30 && n%1_000_000 == 0 }

// HumanSize says a byte count the way people read file sizes, in the binary units that
// platform limits use (Telegram's 20 MB is 20 MiB): "20 MB", "1.5 MB", "5 KB". A count of
// whole decimal megabytes is said as such: a limit written 20000000 reads "20 MB", not "19 MB".
func HumanSize(n int64) string {
	const mb = 1 << 20
	switch {
	case decimalMB(n):
		return fmt.Sprintf("%d MB", n/1_000_000)
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 10*mb:
		return fmt.Sprintf("%d MB", (n+mb/2)/mb)
	case n >= mb:
		return fmt.Sprintf("%.1f MB", float64(n)/mb)
	case n >= 1<<10:
		return fmt.Sprintf("%d KB", (n+512)>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
