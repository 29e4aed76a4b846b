package channels

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadPart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "voice.ogg")
	if err := os.WriteFile(path, bytes.Repeat([]byte("x"), 2000), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadPart(Part{Type: PartAudio, Path: path}, 0); err != nil || len(b) != 2000 {
		t.Fatalf("ReadPart = %d bytes, %v", len(b), err)
	}
	if _, err := ReadPart(Part{Type: PartAudio, Path: path}, 1000); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "voice.ogg") {
		t.Fatalf("over the limit: %v", err)
	}
	if b, err := ReadPart(Part{Type: PartImage, Data: []byte("abc")}, 10); err != nil || string(b) != "abc" {
		t.Fatalf("Data: %q %v", b, err)
	}
	if _, err := ReadPart(Part{Type: PartImage, Data: []byte("abcdef")}, 3); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Data over the limit: %v", err)
	}
	if _, err := ReadPart(Part{Type: PartFile}, 0); err == nil {
		t.Fatal("a part with nothing read as empty")
	}
	if _, err := ReadPart(Part{Type: PartFile, Path: t.TempDir()}, 0); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a directory: %v", err)
	}
	if _, err := ReadPart(Part{Type: PartFile, Path: filepath.Join(t.TempDir(), "gone")}, 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
}

func TestAccessValidateNamesTheKey(t *testing.T) {
	digits := func(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
	err := Access{DMPolicy: "public", AllowFrom: []string{"123", "@bob"}}.Validate("telegram", digits, "a number")
	if err == nil || !strings.Contains(err.Error(), "channels.telegram.dm_policy") || !strings.Contains(err.Error(), "channels.telegram.allow_from[1]") {
		t.Fatalf("Validate = %v", err)
	}
	if err := (Access{DMPolicy: DMOpen, AllowFrom: []string{"1"}}).Validate("telegram", digits, ""); err != nil {
		t.Fatal(err)
	}
}

// A size over the limit reads as more than the limit: 20.4 MB over a limit written
// 20000000 said "(19 MB; I can take up to 20 MB)", the size in binary units and the limit
// in decimal ones.
func TestTooLargeSaysASizeAboveTheLimit(t *testing.T) {
	cases := []struct {
		size, limit int64
		want        string
	}{
		{20_400_000, 20_000_000, "(20.4 MB; I can take up to 20 MB)"},
		{20_010_000, 20_000_000, "(more than 20 MB; I can take up to 20 MB)"},
		{25 << 20, 20_000_000, "(26.2 MB; I can take up to 20 MB)"},
		{21 << 20, 20 << 20, "(21 MB; I can take up to 20 MB)"},
		{20<<20 + 1000, 20 << 20, "(more than 20 MB; I can take up to 20 MB)"},
		{1500, 1000, "(1 KB; I can take up to 1000 bytes)"},
	}
	for _, c := range cases {
		got := TooLarge("that voice note", PartAudio, c.size, c.limit).Text
		if !strings.Contains(got, c.want) {
			t.Errorf("%d over %d: %q; want it to say %q", c.size, c.limit, got, c.want)
		}
	}
}
