// Package voicetest helps test voice features with real audio: it speaks sentences with
// espeak-ng, writes recogniser grammars, and runs a fake OpenAI-compatible audio server
// (transcriptions and speech) on 127.0.0.1 for the real SDK client to talk to.
package voicetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gateway/internal/audio"
)

// RequireTools skips t when a program is missing, except under CI=true, where a missing
// tool fails the test: CI must have them.
func RequireTools(t testing.TB, names ...string) {
	t.Helper()
	if err := audio.CheckTools(names...); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("voice test needs its tools under CI: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
}

// SpeakWAV returns text spoken by espeak-ng as WAV (22.05 kHz mono).
func SpeakWAV(t testing.TB, text string) []byte {
	t.Helper()
	b, err := SpeakWAVContext(t.Context(), text)
	if err != nil {
		t.Fatalf("speak %q: %v", text, err)
	}
	return b
}

// SpeakOgg returns text spoken by espeak-ng as Ogg/Opus, like a voice note.
func SpeakOgg(t testing.TB, text string) []byte {
	t.Helper()
	b, err := SpeakOggContext(t.Context(), text)
	if err != nil {
		t.Fatalf("speak %q: %v", text, err)
	}
	return b
}

// SpeakWAVContext is SpeakWAV for use outside a test's goroutine.
func SpeakWAVContext(ctx context.Context, text string) ([]byte, error) {
	if err := audio.CheckTools("espeak-ng"); err != nil {
		return nil, err
	}
	// espeak-ng reads the text from stdin, so it is never taken for an option.
	return audio.Run(ctx, audio.Cmd{
		Argv: []string{"espeak-ng", "--stdout"}, Stdin: strings.NewReader(text),
		Timeout: 30 * time.Second, MaxStdout: 64 << 20,
	})
}

// SpeakOggContext is SpeakOgg for use outside a test's goroutine.
func SpeakOggContext(ctx context.Context, text string) ([]byte, error) {
	wav, err := SpeakWAVContext(ctx, text)
	if err != nil {
		return nil, err
	}
	return Convert(ctx, wav, audio.ToOggOpus)
}

// Convert runs one of the audio package's converters on in-memory bytes.
func Convert(ctx context.Context, in []byte, conv func(ctx context.Context, in, out string) error) ([]byte, error) {
	dir, err := os.MkdirTemp("", "voicetest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	src, dst := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	if err := os.WriteFile(src, in, 0o600); err != nil {
		return nil, err
	}
	if err := conv(ctx, src, dst); err != nil {
		return nil, err
	}
	return os.ReadFile(dst)
}

// Encode converts in-memory audio with ffmpeg to the named output format ("aiff", "mp3",
// "wav", "flac", "webm", ...), for tests that need a particular container.
func Encode(t testing.TB, in []byte, format string) []byte {
	t.Helper()
	b, err := Convert(t.Context(), in, func(ctx context.Context, src, dst string) error {
		_, err := audio.Run(ctx, audio.Cmd{Argv: []string{"ffmpeg", "-nostdin", "-v", "error", "-y",
			"-i", "file:" + src, "-f", format, "file:" + dst}})
		return err
	})
	if err != nil {
		t.Fatalf("encode as %s: %v", format, err)
	}
	return b
}

// WriteFile writes b to name in a fresh temporary directory of t and returns the path.
func WriteFile(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Grammar writes a JSGF grammar accepting exactly the given phrases (lower-case words)
// and returns its path. With it, pocketsphinx recognises synthetic speech reliably.
func Grammar(t testing.TB, phrases ...string) string {
	t.Helper()
	if len(phrases) == 0 {
		t.Fatal("Grammar needs at least one phrase")
	}
	alts := make([]string, len(phrases))
	for i, p := range phrases {
		alts[i] = strings.Join(strings.Fields(strings.ToLower(p)), " ")
	}
	src := fmt.Sprintf("#JSGF V1.0;\ngrammar phrases;\npublic <phrase> = %s;\n", strings.Join(alts, " | "))
	return WriteFile(t, "phrases.gram", []byte(src))
}

// PocketsphinxCommand is an stt.command for Debian's pocketsphinx (5prealpha) constrained
// to a JSGF grammar: it reads a 16 kHz mono WAV ({input}) and prints one line per utterance.
func PocketsphinxCommand(grammar string) []string {
	return []string{"pocketsphinx_continuous", "-infile", "{input}", "-jsgf", grammar, "-logfn", "/dev/null"}
}

// EspeakCommand is a tts.command for espeak-ng writing WAV to {output}.
func EspeakCommand() []string {
	return []string{"espeak-ng", "-w", "{output}", "-f", "{text_file}"}
}

// HasTools reports whether all the named programs are on PATH.
func HasTools(names ...string) bool {
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			return false
		}
	}
	return true
}

// SilenceWAV returns d of digital silence as 16 kHz mono 16-bit WAV (no tools needed).
func SilenceWAV(d time.Duration) []byte {
	const rate = 16000
	n := int(d.Seconds() * rate)
	b := make([]byte, 44+2*n)
	copy(b, "RIFF")
	le32(b[4:], uint32(36+2*n))
	copy(b[8:], "WAVEfmt ")
	le32(b[16:], 16)
	le16(b[20:], 1) // PCM
	le16(b[22:], 1) // mono
	le32(b[24:], rate)
	le32(b[28:], rate*2)
	le16(b[32:], 2)
	le16(b[34:], 16)
	copy(b[36:], "data")
	le32(b[40:], uint32(2*n))
	return b
}

func le16(b []byte, v uint16) { b[0], b[1] = byte(v), byte(v>>8) }
func le32(b []byte, v uint32) { b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24) }
