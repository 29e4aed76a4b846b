// Package audio probes and converts audio files with ffmpeg/ffprobe, for speech-to-text,
// text-to-speech and the channel adapters that send voice notes. Every program runs with a
// timeout and an argument list (never a shell); errors quote the end of its stderr.
package audio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

var (
	// ErrUnreadable means ffprobe/ffmpeg could not read the file as any media format
	// (empty, truncated, random bytes).
	ErrUnreadable = errors.New("not a readable media file")
	// ErrNoAudio means the file is readable media but has no audio stream (an image, a
	// silent video). Info.Format still names what it is.
	ErrNoAudio = errors.New("no audio stream")
)

// Info describes an audio file.
type Info struct {
	Format     string        // ffprobe's format name: "ogg", "mp3", "wav", "matroska,webm", "mov,mp4,m4a,3gp,3g2,mj2", ...
	Codec      string        // codec of the first audio stream: "opus", "mp3", "pcm_s16le", ...
	Duration   time.Duration // 0 when it cannot be known
	SampleRate int
	Channels   int
	Video      bool // the file also has a picture (a video note, a video)
}

// Inputs are read through ffmpeg's file protocol only: a crafted playlist cannot make
// ffmpeg fetch URLs, and a path cannot be mistaken for an option or another protocol.
func input(path string) string { return "file:" + path }

var inputSafety = []string{"-protocol_whitelist", "file"}

type probeJSON struct {
	Streams []struct {
		CodecType  string `json:"codec_type"`
		CodecName  string `json:"codec_name"`
		SampleRate string `json:"sample_rate"`
		Channels   int    `json:"channels"`
		Duration   string `json:"duration"`
	} `json:"streams"`
	Format struct {
		FormatName string `json:"format_name"`
		Duration   string `json:"duration"`
	} `json:"format"`
}

// Probe reads the format, first audio stream and duration of path. Ogg/Opus files are
// read directly; other files with ffprobe. When the container
// does not record a duration (e.g. WebM from a browser recorder) the audio is decoded once
// to measure it. A file that is not media fails with ErrUnreadable; media without sound
// fails with ErrNoAudio and an Info whose Format names what it is.
func Probe(ctx context.Context, path string) (Info, error) {
	if info, ok := oggOpusInfo(path); ok {
		return info, nil
	}
	argv := append([]string{"ffprobe", "-v", "error", "-hide_banner"}, inputSafety...)
	argv = append(argv, "-print_format", "json", "-show_format", "-show_streams", input(path))
	out, err := Run(ctx, Cmd{Argv: argv, MaxStdout: 1 << 20})
	if err != nil {
		return Info{}, classify(err)
	}
	var pj probeJSON
	if err := json.Unmarshal(out, &pj); err != nil {
		return Info{}, fmt.Errorf("ffprobe: reading its output: %w", err)
	}
	info := Info{Format: pj.Format.FormatName}
	found := false
	for _, s := range pj.Streams {
		if s.CodecType == "video" {
			info.Video = true
		}
	}
	for _, s := range pj.Streams {
		if s.CodecType != "audio" {
			continue
		}
		found = true
		info.Codec = s.CodecName
		info.SampleRate, _ = strconv.Atoi(s.SampleRate)
		info.Channels = s.Channels
		info.Duration = seconds(s.Duration)
		break
	}
	if !found {
		if info.Format == "" {
			return info, ErrUnreadable
		}
		return info, fmt.Errorf("%w (the file is %s)", ErrNoAudio, info.Format)
	}
	if d := seconds(pj.Format.Duration); d > 0 {
		info.Duration = d
	}
	if info.Duration <= 0 {
		d, err := measure(ctx, path)
		if err != nil {
			return info, err
		}
		info.Duration = d
	}
	return info, nil
}

// measure decodes the audio of path and returns how long it played.
func measure(ctx context.Context, path string) (time.Duration, error) {
	argv := append([]string{"ffmpeg", "-nostdin", "-v", "error", "-hide_banner"}, inputSafety...)
	argv = append(argv, "-i", input(path), "-vn", "-f", "null", "-progress", "pipe:1", "-nostats", "-")
	out, err := Run(ctx, Cmd{Argv: argv, MaxStdout: 4 << 20})
	if err != nil && !errors.Is(err, ErrOutputTooLarge) {
		return 0, classify(err)
	}
	var last time.Duration
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "out_time_us="); ok {
			if us, err := strconv.ParseInt(v, 10, 64); err == nil && us > 0 {
				last = time.Duration(us) * time.Microsecond
			}
		}
	}
	return last, nil
}

func seconds(s string) time.Duration {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

// classify turns a failed ffmpeg/ffprobe run on bad input into ErrUnreadable (keeping the
// details), and leaves other failures (missing program, timeout) as they are.
func classify(err error) error {
	var re *RunError
	if errors.As(err, &re) && !re.TimedOut && re.ExitCode > 0 {
		return fmt.Errorf("%w: %w", ErrUnreadable, err)
	}
	return err
}

// ToWAV16k converts in to 16 kHz mono 16-bit PCM WAV, what most local recognisers want.
func ToWAV16k(ctx context.Context, in, out string) error {
	return convert(ctx, in, out, "-ar", "16000", "-ac", "1", "-c:a", "pcm_s16le", "-f", "wav")
}

// ToOggOpus converts in to Ogg/Opus tuned for speech (48 kHz mono, ~32 kbit/s, VoIP mode):
// the voice-note format of Telegram, Discord and WhatsApp.
func ToOggOpus(ctx context.Context, in, out string) error {
	return convert(ctx, in, out, "-ar", "48000", "-ac", "1", "-c:a", "libopus",
		"-b:a", "32k", "-application", "voip", "-f", "ogg")
}

func convert(ctx context.Context, in, out string, outArgs ...string) error {
	argv := append([]string{"ffmpeg", "-nostdin", "-v", "error", "-hide_banner", "-y"}, inputSafety...)
	argv = append(argv, "-i", input(in), "-vn", "-map_metadata", "-1")
	argv = append(argv, outArgs...)
	argv = append(argv, "file:"+out)
	_, err := Run(ctx, Cmd{Argv: argv})
	return classify(err)
}

// IsOggOpus reports whether b starts an Ogg stream whose first packet is an Opus header.
func IsOggOpus(b []byte) bool {
	// First page: 27-byte header, then b[26] segment sizes, then the first packet.
	if len(b) < 27 || !bytes.Equal(b[:4], []byte("OggS")) {
		return false
	}
	start := 27 + int(b[26])
	return len(b) >= start+8 && bytes.Equal(b[start:start+8], []byte("OpusHead"))
}

// Waveform returns n amplitude samples (0..255) spread evenly over the audio of path,
// scaled so the loudest is 255: the waveform Discord shows on a voice message.
// Silence gives all zeros.
func Waveform(ctx context.Context, path string, n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("waveform: %d samples asked", n)
	}
	const rate = 4000 // plenty to see speech envelopes, cheap to decode
	const maxPCM = 32 << 20
	argv := append([]string{"ffmpeg", "-nostdin", "-v", "error", "-hide_banner"}, inputSafety...)
	argv = append(argv, "-i", input(path), "-vn", "-ac", "1", "-ar", strconv.Itoa(rate), "-f", "s16le", "-c:a", "pcm_s16le", "pipe:1")
	pcm, err := Run(ctx, Cmd{Argv: argv, MaxStdout: maxPCM})
	if err != nil && !errors.Is(err, ErrOutputTooLarge) {
		return nil, classify(err) // beyond maxPCM (over an hour) the start is enough
	}
	samples := len(pcm) / 2
	out := make([]byte, n)
	if samples == 0 {
		return out, nil
	}
	peaks := make([]float64, n)
	var loudest float64
	for i := range n {
		from, to := i*samples/n, (i+1)*samples/n
		if to <= from {
			to = min(from+1, samples)
		}
		var sum float64
		for j := from; j < to; j++ {
			v := float64(int16(uint16(pcm[2*j]) | uint16(pcm[2*j+1])<<8))
			sum += v * v
		}
		peaks[i] = math.Sqrt(sum / float64(to-from)) // RMS: steadier than the peak
		loudest = max(loudest, peaks[i])
	}
	if loudest < 1 {
		return out, nil
	}
	for i, p := range peaks {
		out[i] = byte(math.Round(p / loudest * 255))
	}
	return out, nil
}
