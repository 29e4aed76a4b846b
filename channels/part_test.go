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
