// Package stt is the builtin speech-to-text hook: a message:receive handler that replaces
// each audio part of a message with its transcript. Audio it cannot transcribe is
// explained to the user in words they can act on: a message that was only that audio is
// rejected with them, one with more (a caption, a picture) goes on without it, the user
// told (ReceiveResult.Notice) and the agent noted. Providers: any OpenAI-compatible transcription endpoint, or a local
// program.
package stt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"

	"gateway/builtins/internal/speech"
	"gateway/channels"
	"gateway/hooks"
	"gateway/internal/audio"
)

// Source is the hook source the handler registers under.
const Source = "builtin:stt"

// maxAudioParts bounds the work one message can cause.
const maxAudioParts = 4

// convertBudget is the time allowed, per audio part, for probing and converting on top
// of the provider's Timeout.
const convertBudget = 30 * time.Second

// maxTranscript bounds what a command provider may print.
const maxTranscript = 1 << 20

// Options are the runtime dependencies of STT.
type Options struct {
	Logger     *slog.Logger
	HTTPClient *http.Client // for the openai provider (default: a plain client; every call has a deadline)
	TempDir    string       // where converted audio goes ("" = the system's)
}

// STT transcribes audio parts. It is safe for concurrent use.
type STT struct {
	cfg   Config
	opts  Options
	api   openai.AudioService // the openai provider's client
	slots speech.Slots        // bounds the voice notes processed at once
}

// New checks cfg and that the programs it needs exist (ffmpeg, ffprobe and the command's
// program), so that a broken setup fails at startup and in `gateway check`, not at the
// first voice note. A disabled config gives an STT that registers nothing.
func New(cfg Config, opts Options) (*STT, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &STT{cfg: cfg.WithDefaults(), opts: opts, slots: speech.NewSlots()}
	if !cfg.Enabled {
		return s, nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	api, err := speech.Setup(speech.Provider{Name: s.cfg.Provider, Command: s.cfg.Command,
		BaseURL: s.cfg.BaseURL, APIKey: s.cfg.APIKey, HTTPClient: opts.HTTPClient})
	if err != nil {
		return nil, err
	}
	s.api = api
	return s, nil
}

// Register adds the message:receive handler to scope (nothing when disabled).
func (s *STT) Register(scope *hooks.Scope) {
	if !s.cfg.Enabled {
		return
	}
	// The bus's own timeout is only a backstop: the handler's deadline comes first, so the
	// user gets a reason rather than an untranscribed message reaching the agent.
	limit := s.budget(maxAudioParts) + 5*time.Second
	hooks.Handle(scope, s.receive, hooks.WithTimeout(limit))
}

// budget is the most the handler spends on a message with n audio parts.
func (s *STT) budget(n int) time.Duration {
	return time.Duration(n) * (s.cfg.Timeout + convertBudget)
}

func (s *STT) receive(ctx context.Context, ev *hooks.MessageReceive) (*hooks.ReceiveResult, error) {
	n := 0
	for _, p := range ev.Parts {
		if p.Type == channels.PartAudio {
			n++
		}
	}
	if n == 0 {
		return nil, nil
	}
	if n > maxAudioParts {
		return reject(fmt.Sprintf("I can transcribe at most %d audio files in one message; please send them separately.", maxAudioParts)), nil
	}
	lang := ev.Language
	if lang == "" {
		lang = s.cfg.Language
	}
	hctx, cancel := context.WithTimeout(ctx, s.budget(n))
	defer cancel()
	var (
		parts             = make([]channels.Part, 0, len(ev.Parts))
		told              []string // why each audio part that failed was not transcribed
		heard, heardVoice bool     // some audio was transcribed; some voice note was
		rest              bool     // the message has more than the audio that failed
	)
	for _, p := range ev.Parts {
		if p.Type != channels.PartAudio {
			parts = append(parts, p)
			rest = rest || p.Type != channels.PartText || strings.TrimSpace(p.Text) != ""
			continue
		}
		start := time.Now()
		text, err := s.Transcribe(hctx, p, lang)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err() // the gateway gave up; nobody reads a reason
			}
			var f *Failure
			switch {
			case errors.As(err, &f):
			case hctx.Err() != nil:
				f = fail("it took too long to process", err)
			default:
				f = fail("something went wrong on my side", err)
			}
			s.opts.Logger.Warn("stt: could not transcribe", "channel", ev.Channel, "chat", ev.ChatID,
				"message", ev.MessageID, "reason", f.Reason, "err", f.Err)
			told = append(told, fmt.Sprintf("I couldn't transcribe your %s: %s.", noun(p), f.Reason))
			// In its place the agent reads that it came, as it does of a file that could
			// not be downloaded.
			parts = append(parts, channels.TextPart(untranscribed(p)))
			continue
		}
		s.opts.Logger.Debug("stt: transcribed", "channel", ev.Channel, "chat", ev.ChatID,
			"message", ev.MessageID, "chars", len(text), "took", time.Since(start))
		parts = append(parts, channels.TextPart(text))
		heard, heardVoice, rest = true, heardVoice || p.Voice, true
	}
	// The answer is spoken only for what was heard: a caption is no transcript.
	voice := (ev.IsVoice || heardVoice) && heard
	res := &hooks.ReceiveResult{Action: hooks.ActionTransform, Parts: parts, IsVoice: &voice}
	if len(told) > 0 {
		if !rest {
			return reject(strings.Join(told, "\n")), nil // nothing else to answer
		}
		// The words sent with the audio still go on: retyping them is the user's loss.
		without := "it"
		if len(told) > 1 {
			without = "them"
		}
		res.Notice = strings.Join(told, "\n") + " I'll answer the rest of your message without " + without + "."
	}
	return res, nil
}

// untranscribed tells the agent that audio it cannot read came with the message.
func untranscribed(p channels.Part) string {
	what := "a " + noun(p)
	if !p.Voice {
		what = "an audio file"
		if p.Name != "" {
			what += " (" + p.Name + ")"
		}
	}
	return fmt.Sprintf("[The user also sent %s, which could not be transcribed]", what)
}

func reject(reason string) *hooks.ReceiveResult {
	return &hooks.ReceiveResult{Action: hooks.ActionReject, Reason: reason}
}

func noun(p channels.Part) string {
	if p.Voice {
		return "voice note"
	}
	return "audio file"
}

// Failure is a transcription that did not work. Reason completes the sentence "I couldn't
// transcribe your voice note: …" in words a user understands; Err has the details for logs.
type Failure struct {
	Reason string
	Err    error
}

func (f *Failure) Error() string {
	if f.Err == nil {
		return f.Reason
	}
	return f.Reason + ": " + f.Err.Error()
}

func (f *Failure) Unwrap() error { return f.Err }

func fail(reason string, err error) *Failure { return &Failure{Reason: reason, Err: err} }

// Transcribe returns the words spoken in the audio part p. Errors are *Failure, except
// when ctx itself ends.
func (s *STT) Transcribe(ctx context.Context, p channels.Part, language string) (string, error) {
	if err := s.slots.Acquire(ctx); err != nil {
		return "", err
	}
	release := sync.OnceFunc(s.slots.Release)
	defer release()
	work, err := os.MkdirTemp(s.opts.TempDir, "stt-")
	if err != nil {
		return "", fail("I could not store it for processing", err)
	}
	defer os.RemoveAll(work)

	path := p.Path
	if path == "" {
		if len(p.Data) == 0 {
			return "", fail("the audio file is empty", errors.New("part has neither path nor data"))
		}
		path = filepath.Join(work, "in")
		if err := os.WriteFile(path, p.Data, 0o600); err != nil {
			return "", fail("I could not store it for processing", err)
		}
	}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return "", fail("the audio file could not be found", err)
	case !st.Mode().IsRegular():
		return "", fail("the audio file could not be read", fmt.Errorf("%s is not a regular file", path))
	case st.Size() == 0:
		return "", fail("the audio file is empty", nil)
	case st.Size() > s.cfg.MaxBytes:
		a, b := sizes(st.Size(), s.cfg.MaxBytes)
		return "", fail(fmt.Sprintf("it is %s and the limit is %s", a, b), nil)
	}

	prep, cancel := context.WithTimeout(ctx, convertBudget)
	defer cancel()
	info, err := audio.Probe(prep, path)
	if err != nil {
		return "", s.audioFailure(ctx, prep, info, err)
	}
	if info.Duration > s.cfg.MaxDuration {
		return "", fail(fmt.Sprintf("it is %s long and the limit is %s", durationText(info.Duration, true), durationText(s.cfg.MaxDuration, false)), nil)
	}

	var text string
	switch s.cfg.Provider {
	case "command":
		text, err = s.viaCommand(ctx, prep, path, work, language)
	default:
		text, err = s.viaOpenAI(ctx, prep, path, work, info, language, release)
	}
	if err != nil {
		return "", err
	}
	if text = strings.TrimSpace(text); text == "" {
		return "", fail("I could not hear any words in it", nil)
	}
	return text, nil
}

// audioFailure explains a probe or conversion failure.
func (s *STT) audioFailure(ctx, prep context.Context, info audio.Info, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case prep.Err() != nil:
		return fail("preparing the audio took too long", err)
	case errors.Is(err, audio.ErrNoAudio):
		return fail(fmt.Sprintf("the file is not audio (it looks like %s)", describeFormat(info.Format)), err)
	case errors.Is(err, audio.ErrUnreadable):
		return fail("the file is damaged or not in an audio format I can read", err)
	}
	return fail("I could not process the audio", err)
}

// openaiUpload maps what the OpenAI endpoint accepts as is (by container and codec) to
// the file name it needs to recognise it; ok is false for what must be converted first.
func openaiUpload(info audio.Info) (name, mime string, ok bool) {
	if info.Video {
		return "", "", false // send the sound, not the picture
	}
	switch info.Format {
	case "ogg":
		return "voice.ogg", "audio/ogg", info.Codec == "opus" || info.Codec == "vorbis" || info.Codec == "flac"
	case "mp3":
		return "voice.mp3", "audio/mpeg", true
	case "wav":
		return "voice.wav", "audio/wav", true
	case "flac":
		return "voice.flac", "audio/flac", true
	case "matroska,webm":
		return "voice.webm", "audio/webm", info.Codec == "opus" || info.Codec == "vorbis"
	case "mov,mp4,m4a,3gp,3g2,mj2":
		return "voice.m4a", "audio/mp4", info.Codec == "aac" || info.Codec == "alac" || info.Codec == "mp3"
	}
	return "", "", false
}

// release gives up the audio slot once the conversion is done (see the call).
func (s *STT) viaOpenAI(ctx, prep context.Context, path, work string, info audio.Info, language string, release func()) (string, error) {
	name, mime, ok := openaiUpload(info)
	if !ok {
		conv := filepath.Join(work, "voice.ogg")
		if err := audio.ToOggOpus(prep, path, conv); err != nil {
			return "", s.audioFailure(ctx, prep, info, err)
		}
		path, name, mime = conv, "voice.ogg", "audio/ogg"
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fail("I could not read it back", err)
	}
	defer f.Close()
	// Waiting for the service is no work of ours: a slot held through it would make the
	// voice notes of every other chat wait behind a slow one.
	release()

	callCtx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	params := openai.AudioTranscriptionNewParams{
		File:  openai.File(f, name, mime),
		Model: s.cfg.Model,
	}
	if language != "" {
		params.Language = openai.String(language)
	}
	res, err := s.api.Transcriptions.New(callCtx, params)
	if err != nil {
		return "", s.providerFailure(ctx, callCtx, err)
	}
	return res.Text, nil
}

// providerFailure explains a failed call to the speech service.
func (s *STT) providerFailure(ctx, callCtx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if callCtx.Err() != nil {
		return fail("the speech service did not answer in time", err)
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		switch code := apiErr.StatusCode; {
		case code == http.StatusUnauthorized || code == http.StatusForbidden:
			return fail("the speech service refused the request", err)
		case code == http.StatusRequestEntityTooLarge:
			return fail("it is too large for the speech service", err)
		case code == http.StatusTooManyRequests:
			return fail("the speech service is busy right now; please try again in a minute", err)
		case code >= 500:
			return fail("the speech service is not available right now; please try again later", err)
		default:
			return fail("the speech service could not process it", err)
		}
	}
	return fail("the speech service could not be reached", err)
}

func (s *STT) viaCommand(ctx, prep context.Context, path, work, language string) (string, error) {
	in := path
	switch s.cfg.InputFormat {
	case InputWAV:
		in = filepath.Join(work, "voice.wav")
		if err := audio.ToWAV16k(prep, path, in); err != nil {
			return "", s.audioFailure(ctx, prep, audio.Info{}, err)
		}
	case InputOgg:
		in = filepath.Join(work, "voice.ogg")
		if err := audio.ToOggOpus(prep, path, in); err != nil {
			return "", s.audioFailure(ctx, prep, audio.Info{}, err)
		}
	}
	argv := make([]string, len(s.cfg.Command))
	for i, a := range s.cfg.Command {
		a = strings.ReplaceAll(a, "{input}", in)
		argv[i] = strings.ReplaceAll(a, "{language}", language)
	}
	out, err := audio.Run(ctx, audio.Cmd{Argv: argv, Timeout: s.cfg.Timeout, MaxStdout: maxTranscript})
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		var re *audio.RunError
		if errors.As(err, &re) && re.TimedOut {
			return "", fail("the speech recognizer did not answer in time", err)
		}
		return "", fail("the speech recognizer failed", err)
	}
	// Recognisers such as pocketsphinx print one line per utterance.
	var lines []string
	for line := range strings.Lines(string(out)) {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, " "), nil
}

// describeFormat names a non-audio file for a user.
func describeFormat(format string) string {
	switch {
	case format == "png_pipe" || format == "apng":
		return "a PNG image"
	case format == "jpeg_pipe" || format == "mjpeg":
		return "a JPEG image"
	case format == "gif":
		return "a GIF image"
	case format == "webp_pipe":
		return "a WebP image"
	case strings.HasSuffix(format, "_pipe") || format == "image2":
		return "an image"
	case strings.Contains(format, "mp4") || strings.Contains(format, "webm") || format == "avi":
		return "a video with no sound"
	case format == "tty":
		return "a text file"
	}
	return "a " + format + " file"
}

// durationText says d in words: "45 seconds", "3 minutes", "2 minutes 5 seconds".
// Measured lengths round up, so a file just over a limit never reads as equal to it.
func durationText(d time.Duration, roundUp bool) string {
	secs := int64(d.Round(time.Second) / time.Second)
	if roundUp {
		secs = int64((d + time.Second - 1) / time.Second)
	}
	unit := func(n int64, word string) string {
		if n == 1 {
			return "1 " + word
		}
		return fmt.Sprintf("%d %ss", n, word)
	}
	m, sec := secs/60, secs%60
	switch {
	case m == 0:
		return unit(sec, "second")
	case sec == 0:
		return unit(m, "minute")
	}
	return unit(m, "minute") + " " + unit(sec, "second")
}

// sizes says two byte counts in words, precisely enough to differ.
func sizes(got, limit int64) (string, string) {
	f := func(n int64) string {
		switch {
		case n >= 1_000_000:
			return strings.Replace(fmt.Sprintf("%.1f MB", float64(n)/1e6), ".0 ", " ", 1)
		case n >= 1000:
			return fmt.Sprintf("%d KB", n/1000)
		}
		return fmt.Sprintf("%d bytes", n)
	}
	a, b := f(got), f(limit)
	if a == b {
		return fmt.Sprintf("%d bytes", got), fmt.Sprintf("%d bytes", limit)
	}
	return a, b
}
