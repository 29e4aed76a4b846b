package audio_test

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gateway/builtins/voicetest"
	"gateway/internal/audio"
	"gateway/internal/childproc/childproctest"
)

func needTools(t *testing.T) {
	voicetest.RequireTools(t, "ffmpeg", "ffprobe", "espeak-ng")
}

func TestProbeAndConvertRealSpeech(t *testing.T) {
	needTools(t)
	ctx := t.Context()
	wav := voicetest.WriteFile(t, "speech.wav", voicetest.SpeakWAV(t, "please turn on the kitchen lights"))

	in, err := audio.Probe(ctx, wav)
	if err != nil {
		t.Fatal(err)
	}
	if in.Format != "wav" || in.Codec != "pcm_s16le" || in.Duration < time.Second || in.Duration > 5*time.Second {
		t.Fatalf("probe of espeak WAV = %+v", in)
	}

	dir := t.TempDir()
	ogg := filepath.Join(dir, "voice.ogg")
	if err := audio.ToOggOpus(ctx, wav, ogg); err != nil {
		t.Fatal(err)
	}
	oi, err := audio.Probe(ctx, ogg)
	if err != nil {
		t.Fatal(err)
	}
	if oi.Format != "ogg" || oi.Codec != "opus" || oi.SampleRate != 48000 || oi.Channels != 1 {
		t.Fatalf("probe of Ogg/Opus = %+v", oi)
	}
	if d := oi.Duration - in.Duration; d < -100*time.Millisecond || d > 100*time.Millisecond {
		t.Fatalf("Ogg lasts %s, the WAV %s", oi.Duration, in.Duration)
	}
	b, _ := os.ReadFile(ogg)
	if !audio.IsOggOpus(b) {
		t.Fatal("ToOggOpus output is not recognised as Ogg/Opus")
	}
	if voicetest.HasTools("opusinfo") {
		out, err := audio.Run(ctx, audio.Cmd{Argv: []string{"opusinfo", ogg}, MaxStdout: 1 << 16})
		if err != nil || !strings.Contains(string(out), "Playback length") {
			t.Fatalf("opusinfo cannot read our Ogg/Opus: %v\n%s", err, out)
		}
	}

	wav16 := filepath.Join(dir, "voice16.wav")
	if err := audio.ToWAV16k(ctx, ogg, wav16); err != nil {
		t.Fatal(err)
	}
	wi, err := audio.Probe(ctx, wav16)
	if err != nil {
		t.Fatal(err)
	}
	if wi.Format != "wav" || wi.Codec != "pcm_s16le" || wi.SampleRate != 16000 || wi.Channels != 1 {
		t.Fatalf("probe of 16k WAV = %+v", wi)
	}
}

func TestIsOggOpus(t *testing.T) {
	needTools(t)
	wav := voicetest.SpeakWAV(t, "hello")
	opus := voicetest.SpeakOgg(t, "hello")
	vorbis := voicetest.Encode(t, wav, "ogg") // ffmpeg's default Ogg codec is Vorbis (or FLAC)
	cases := []struct {
		name string
		b    []byte
		want bool
	}{
		{"opus", opus, true},
		{"vorbis", vorbis, false},
		{"wav", wav, false},
		{"empty", nil, false},
		{"OggS only", []byte("OggS"), false},
		{"random", randomBytes(4096), false},
	}
	for _, c := range cases {
		if got := audio.IsOggOpus(c.b); got != c.want {
			t.Errorf("IsOggOpus(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}

func randomBytes(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return b
}

func pngBytes(t *testing.T) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, 16, 16))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestProbeBadInput(t *testing.T) {
	voicetest.RequireTools(t, "ffprobe")
	ctx := t.Context()
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty.ogg", nil, audio.ErrUnreadable},
		{"random.ogg", randomBytes(2048), audio.ErrUnreadable},
		{"image.ogg", pngBytes(t), audio.ErrNoAudio},
	} {
		info, err := audio.Probe(ctx, voicetest.WriteFile(t, c.name, c.b))
		if !errors.Is(err, c.want) {
			t.Errorf("Probe(%s) = %+v, %v; want %v", c.name, info, err, c.want)
		}
		if c.want == audio.ErrNoAudio && info.Format != "png_pipe" {
			t.Errorf("Probe(%s) names the format %q, want png_pipe", c.name, info.Format)
		}
	}
	if _, err := audio.Probe(ctx, filepath.Join(t.TempDir(), "missing.ogg")); err == nil {
		t.Error("Probe of a missing file succeeded")
	}
}

// Browser recorders stream WebM without a duration in the header; Probe must still
// find how long it is, or max_duration could not be enforced.
func TestProbeMeasuresStreamedWebM(t *testing.T) {
	needTools(t)
	ctx := t.Context()
	wav := voicetest.WriteFile(t, "speech.wav", voicetest.SpeakWAV(t, "please turn on the kitchen lights"))
	webm, err := audio.Run(ctx, audio.Cmd{
		Argv:      []string{"ffmpeg", "-nostdin", "-v", "error", "-i", "file:" + wav, "-c:a", "libopus", "-f", "webm", "pipe:1"},
		MaxStdout: 8 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	p := voicetest.WriteFile(t, "rec.webm", webm)
	info, err := audio.Probe(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if info.Format != "matroska,webm" || info.Duration < time.Second {
		t.Fatalf("Probe(streamed webm) = %+v, want a duration over 1s", info)
	}
}

func TestWaveform(t *testing.T) {
	needTools(t)
	ctx := t.Context()
	speech := voicetest.WriteFile(t, "voice.ogg", voicetest.SpeakOgg(t, "one. two. three."))
	w, err := audio.Waveform(ctx, speech, 64)
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 64 {
		t.Fatalf("got %d samples, want 64", len(w))
	}
	var top, quiet int
	for _, v := range w {
		if v == 255 {
			top++
		}
		if v < 40 {
			quiet++
		}
	}
	if top == 0 || quiet == 0 {
		t.Fatalf("waveform of speech with pauses has no peak or no quiet part: %v", w)
	}

	silent := voicetest.WriteFile(t, "silence.wav", voicetest.SilenceWAV(time.Second))
	w, err = audio.Waveform(ctx, silent, 16)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w, make([]byte, 16)) {
		t.Fatalf("waveform of silence = %v, want zeros", w)
	}
}

func TestCheckToolsNamesToolAndPackage(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := audio.CheckTools("ffprobe", "no-such-recognizer")
	if err == nil {
		t.Fatal("CheckTools found programs on an empty PATH")
	}
	msg := err.Error()
	for _, want := range []string{`"ffprobe" not found`, "apt-get install ffmpeg", `"no-such-recognizer" not found`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
}

func TestRunBoundsAndReports(t *testing.T) {
	ctx := t.Context()
	_, err := audio.Run(ctx, audio.Cmd{Argv: []string{"sh", "-c", "sleep 30 & sleep 30"}, Timeout: 200 * time.Millisecond})
	var re *audio.RunError
	if !errors.As(err, &re) || !re.TimedOut {
		t.Fatalf("Run of a hanging program = %v, want a timeout RunError", err)
	}

	_, err = audio.Run(ctx, audio.Cmd{Argv: []string{"sh", "-c", "echo first line >&2; echo the real problem >&2; exit 3"}})
	if !errors.As(err, &re) || re.ExitCode != 3 || !strings.Contains(err.Error(), "the real problem") {
		t.Fatalf("Run of a failing program = %v, want exit 3 quoting stderr", err)
	}

	out, err := audio.Run(ctx, audio.Cmd{Argv: []string{"head", "-c", "100000", "/dev/zero"}, MaxStdout: 1000})
	if !errors.Is(err, audio.ErrOutputTooLarge) || len(out) != 1000 {
		t.Fatalf("Run with too much output = %d bytes, %v", len(out), err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := audio.Run(cctx, audio.Cmd{Argv: []string{"true"}}); err == nil {
		t.Fatal("Run with a cancelled ctx succeeded")
	}
}

// A speech program run through a wrapper script that leaves something running with its
// stdout (a server it started, a stray child): the transcript it printed is taken when the
// script exits, not after a wait that turned it into an error, and the leftover is killed.
func TestRunTakesTheOutputOfAProgramThatLeftABackgroundProcess(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	start := time.Now()
	out, err := audio.Run(t.Context(), audio.Cmd{Argv: []string{"sh", "-c", "sleep 30 & echo $! > " + pidFile + "; echo hello world"}, MaxStdout: 1000})
	if err != nil || string(out) != "hello world\n" {
		t.Fatalf("Run = %q, %v; want the transcript", out, err)
	}
	// Waiting for the background process takes its 30 s; a loaded machine can take
	// seconds to start a shell, so the bound is far from both.
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("Run took %s: it waited for the background process", elapsed)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	childproctest.WaitGone(t, pid, "the background process the program left")
}

// Ogg/Opus is read without ffprobe; it must agree with ffprobe.
func TestProbeOggOpusMatchesFFprobe(t *testing.T) {
	needTools(t)
	ctx := t.Context()
	for _, text := range []string{"hi", "please turn on the kitchen lights and then play some music in the living room"} {
		p := voicetest.WriteFile(t, "voice.ogg", voicetest.SpeakOgg(t, text))
		fast, err := audio.Probe(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		out, err := audio.Run(ctx, audio.Cmd{Argv: []string{"ffprobe", "-v", "error", "-show_entries",
			"format=duration", "-of", "csv=p=0", p}, MaxStdout: 1024})
		if err != nil {
			t.Fatal(err)
		}
		want, err := time.ParseDuration(strings.TrimSpace(string(out)) + "s")
		if err != nil {
			t.Fatal(err)
		}
		// ffprobe counts the encoder's pre-skip (6.5 ms); the playback length does not.
		if d := fast.Duration - want; d < -10*time.Millisecond || d > 0 || fast.Codec != "opus" || fast.Channels != 1 {
			t.Fatalf("Probe = %+v, ffprobe says %s", fast, want)
		}
	}
	// A truncated file still has a readable start; a file with only the header is not
	// decodable and goes to ffprobe, which says so.
	full := voicetest.SpeakOgg(t, "hello there")
	if _, err := audio.Probe(ctx, voicetest.WriteFile(t, "head.ogg", full[:60])); err == nil {
		t.Error("Probe of a header-only Ogg/Opus file succeeded")
	}
}
