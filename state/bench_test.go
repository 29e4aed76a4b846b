package state

import (
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
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

// BenchmarkDoneConcurrent is many chats' turns ending at once: 64 goroutines each
// marking their own accepted messages done.
func BenchmarkDoneConcurrent(b *testing.B) {
	db, err := Open(b.TempDir(), Limits{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	seqs := make([]uint64, b.N)
	for i := range seqs {
		if seqs[i], err = db.Accept("", make([]byte, 600)); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32) // × GOMAXPROCS goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := db.Done(seqs[next.Add(1)-1]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if p, err := db.Pending(); err != nil || len(p) != 0 {
		b.Fatalf("pending after all done: %d, %v", len(p), err)
	}
}
