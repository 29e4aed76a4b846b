package harness

import (
	"os"
	"os/exec"
	"runtime/debug"
	"testing"
)

// decodeDepthEnv makes the test binary, re-executed with it set, the child of
// TestChunkDecodingFitsAWaitingTurnsStack.
const decodeDepthEnv = "HARNESS_DECODE_DEPTH_CHILD"

// chunkDecodeBudget is the stack a text chunk's decoding may take. A turn waits for the
// model on an 8 KB stack with read about 3 KB under its start; a decoding deeper than
// what is left doubled every turn's stack when the model answered them all at once
// (docs/bench.md, sixth pass). Decoded in one json.Unmarshal, a chunk overflowed this
// budget; a level at a time, with its numbers parsed after, it fits. The race detector's
// frames are larger: 5 KB then (a level at a time fits, the one call overflows 6).
func chunkDecodeBudget() int {
	if raceOn {
		return 5 << 10
	}
	return 4 << 10
}

// usableStack is what an 8 KB stack holds before it must grow: less the runtime's guard,
// 928 bytes on linux/amd64, twice that with the race detector.
func usableStack() int {
	if raceOn {
		return 8<<10 - 2*928
	}
	return 8<<10 - 928
}

// A streamed text chunk (OpenAI) or text event (Anthropic) is decoded within
// chunkDecodeBudget of stack. The child limits
// every goroutine to 8 KB (a stack that would grow past it kills the process), fills all
// but chunkDecodeBudget of one goroutine's stack, and decodes a chunk there.
func TestChunkDecodingFitsAWaitingTurnsStack(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), decodeDepthEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("decoding a text chunk needs more than %d bytes of stack: %v\n%.2000s", chunkDecodeBudget(), err, out)
	}
}

// decodeDepthChild is the child's work; its exit code is the result.
func decodeDepthChild() int {
	debug.SetMaxStack(8 << 10)
	chunk := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",` +
		`"choices":[{"index":0,"delta":{"content":"Hello there, how are you?"},"finish_reason":null}]}`)
	var acc openAIAccum
	event := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello there, how are you?"}}`)
	anth := anthropicAccum{blocks: map[int64]*anthropicBlock{}}
	// The decoders' type caches are built once.
	if _, err := acc.decode(chunk); err != nil {
		return 3
	}
	if _, err := anth.decode(event); err != nil {
		return 3
	}
	done := make(chan int)
	go func() {
		// This goroutine's own frames and the padding take all but the budget.
		padStack((usableStack()-chunkDecodeBudget())/padFrame, func() {
			d, err := acc.decode(chunk)
			if err != nil || d != "Hello there, how are you?" {
				done <- 4
				return
			}
			d, err = anth.decode(event)
			if err != nil || d != "Hello there, how are you?" {
				done <- 5
				return
			}
			done <- 0
		})
	}()
	return <-done
}

// padFrame is about padStack's frame: its buffer and the call's overhead.
const padFrame = 512

// padStack takes about n*padFrame bytes of stack, then calls then.
//
//go:noinline
func padStack(n int, then func()) byte {
	var buf [padFrame - 48]byte
	buf[n%len(buf)] = byte(n)
	if n <= 0 {
		then()
		return buf[0]
	}
	return padStack(n-1, then) + buf[(n*7)%len(buf)]
}
