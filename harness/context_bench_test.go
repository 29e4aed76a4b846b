package harness

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"gateway/internal/llm"
)

// sessionOf2000 writes a 2,000-entry session (user, tool call, tool result, answer; texts
// of a few hundred bytes) to a store and returns the store and key. With compacted set, a
// compaction entry sits after entry 1,600 keeping the last 200 before it.
func sessionOf2000(b *testing.B, compacted bool) (*Store, string) {
	st, err := OpenStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	key := "bench:2000"
	h, err := st.open(key, 1<<30, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("some words of a chat message ", 10)
	for i := 0; h.total < 2000; i++ {
		id := fmt.Sprint("call_", i)
		h.add(llm.Message{Role: llm.RoleUser, Content: fmt.Sprint(i, " ", text)}, false)
		h.add(llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: "lookup", Arguments: json.RawMessage(`{"q":"x"}`)}}}, false)
		h.add(llm.Message{Role: llm.RoleTool, ToolCallID: id, Name: "lookup", Content: text}, false)
		h.add(llm.Message{Role: llm.RoleAssistant, Content: text + text}, false)
		if compacted && h.total == 1600 {
			h.compact("a summary of the first part", cutPoint(h.entries, 200*h.entries[0].tokens), 100_000, false)
		}
		if err := h.flush(); err != nil {
			b.Fatal(err)
		}
	}
	h.release()
	return st, key
}

// BenchmarkContext2000 builds the request context of a 2,000-entry session in memory:
// the budget check (tokens) and the message list the model gets (context).
func BenchmarkContext2000(b *testing.B) {
	st, key := sessionOf2000(b, false)
	h, err := st.open(key, 1<<30, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	if len(h.entries) != 2000 {
		b.Fatalf("%d entries", len(h.entries))
	}
	fixed := estimateFixed("You are helpful.", nil)
	b.ReportAllocs()
	for b.Loop() {
		if h.tokens(fixed) <= 0 || len(h.context(0)) != 2000 {
			b.Fatal("bad context")
		}
	}
}

// BenchmarkLoad2000 opens a 2,000-entry session from its JSONL file (index the file, walk
// the branch, decode what the model may see). Compacted: only the entries after the
// compaction's cut are decoded.
func BenchmarkLoad2000(b *testing.B) {
	for _, compacted := range []bool{false, true} {
		b.Run(fmt.Sprint("compacted=", compacted), func(b *testing.B) {
			st, key := sessionOf2000(b, compacted)
			b.ReportAllocs()
			for b.Loop() {
				h, err := st.open(key, 1<<30, slog.New(slog.DiscardHandler))
				if err != nil || h.total != 2000 {
					b.Fatalf("%v, %d", err, h.total)
				}
			}
		})
	}
}
