package files

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCopy(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(src, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Copy(src, dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "kept" {
		t.Fatalf("copy holds %q", b)
	}
	// An existing file is not overwritten.
	if err := os.WriteFile(src, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if Copy(src, dst) == nil {
		t.Fatal("Copy overwrote an existing file")
	}
	if b, _ := os.ReadFile(dst); string(b) != "kept" {
		t.Fatalf("the existing file now holds %q", b)
	}
	if Copy(filepath.Join(dir, "missing"), filepath.Join(dir, "c")) == nil {
		t.Fatal("Copy of a missing file succeeded")
	}
}

func TestOpenAppendCreatesPrivatelyAndAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	for _, line := range []string{"one\n", "two\n"} {
		f, err := OpenAppend(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "one\ntwo\n" {
		t.Fatalf("file holds %q; want both lines in order", b)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v (%v); want 0600", fi.Mode().Perm(), err)
	}
	if _, err := OpenAppend(filepath.Join(t.TempDir(), "missing", "log.jsonl")); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("a missing folder gave %v; want a not-exist error naming the path", err)
	}
}
