package files

import (
	"os"
	"path/filepath"
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
