package state

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
)

// BenchmarkAcceptDone is the durable intake of one message: accepted (fsynced, deduplicated)
// and, once answered, done (fsynced).
func BenchmarkAcceptDone(b *testing.B) {
	db, err := Open(b.TempDir(), Limits{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	body := make([]byte, 600)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		seq, err := db.Accept(fmt.Sprintf("telegram|%d|%d", i%100, i), body)
		if err != nil {
			b.Fatal(err)
		}
		if err := db.Done(seq); err != nil {
			b.Fatal(err)
		}
	}
}
