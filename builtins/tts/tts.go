// Package tts is the builtin text-to-speech hook: a message:send handler that speaks the
// reply as one Ogg/Opus voice note when the chat's mode asks for it. Providers: any
// OpenAI-compatible speech endpoint, or a local program.
package tts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/openai/openai-go/v3"

	"gateway/builtins/internal/speech"
	"gateway/channels"
	"gateway/hooks"
	"gateway/internal/audio"
)

// Source is the hook source the handler registers under.
const Source = "builtin:tts"

// maxAudioBytes bounds the audio a provider may return (a 1000-character reply is well
// under 1 MB of Opus; WAV from a local program is ~10x that).
const maxAudioBytes = 50 << 20

// convertBudget is the time allowed for converting and probing on top of Timeout.
const convertBudget = 30 * time.Second

// Options are the runtime dependencies of TTS.
type Options struct {
	Logger     *slog.Logger
	HTTPClient *http.Client // for the openai provider
	TempDir    string       // for intermediate files ("" = the system's)
}

// TTS speaks replies. It is safe for concurrent use.
type TTS struct {
	cfg     Config
	opts    Options
	api     openai.AudioService // the openai provider's client
	slots   speech.Slots        // bounds the replies synthesised at once
	speaker *Speaker            // nil with mode off
}

// New checks cfg and that the programs it needs exist (ffmpeg, ffprobe and the command's
// program). With mode off it returns a TTS that registers nothing.
func New(cfg Config, opts Options) (*TTS, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &TTS{cfg: cfg.WithDefaults(), opts: opts, slots: speech.NewSlots()}
	if t.cfg.Mode == ModeOff {
		return t, nil
	}
	api, err := speech.Setup(speech.Provider{Name: t.cfg.Provider, Command: t.cfg.Command,
		BaseURL: t.cfg.BaseURL, APIKey: t.cfg.APIKey, HTTPClient: opts.HTTPClient})
	if err != nil {
		return nil, err
	}
	t.api, t.speaker = api, NewSpeaker()
	return t, nil
}

// Mode is when replies are spoken unless a chat's mode says otherwise (Config.Mode with
// its default); off for a nil TTS (none is configured).
func (t *TTS) Mode() string {
	if t == nil {
		return ModeOff
	}
	return t.cfg.Mode
}

// Register adds the message:send handler to scope (nothing with mode off).
func (t *TTS) Register(scope *hooks.Scope) {
	if t.cfg.Mode == ModeOff {
		return
	}
	hooks.Handle(scope, t.send, hooks.WithTimeout(t.cfg.Timeout+convertBudget+5*time.Second))
}

// Speaks tells whether a reply to ev is spoken: the chat's mode if it has one, else the
// configured mode; inbound speaks only answers to voice.
func (t *TTS) Speaks(ev *hooks.MessageSend) bool {
	if t.cfg.Mode == ModeOff {
		return false
	}
	mode := t.cfg.Mode
	if ev.TTSMode != "" && ValidMode(ev.TTSMode) {
		mode = ev.TTSMode
	}
	switch mode {
	case ModeAlways:
		return true
	case ModeInbound:
		return ev.IsVoice
	}
	return false
}

func (t *TTS) send(ctx context.Context, ev *hooks.MessageSend) (*hooks.SendResult, error) {
	if !t.Speaks(ev) {
		return nil, nil
	}
	text := t.speaker.Speakable(ev.ResponseText, t.cfg.MaxChars)
	if !hasWords(text) {
		return nil, nil
	}
	voice, lang := t.cfg.Voice, t.cfg.Language
	if ev.Voice != "" {
		voice = ev.Voice
	}
	if ev.Language != "" {
		lang = ev.Language
	}
	start := time.Now()
	part, err := t.Synthesize(ctx, text, voice, lang)
	if err != nil {
		return nil, err
	}
	t.opts.Logger.Debug("tts: spoke reply", "channel", ev.Channel, "chat", ev.ChatID,
		"chars", len(text), "seconds", part.Duration, "took", time.Since(start))
	return &hooks.SendResult{Parts: []channels.Part{part}}, nil
}

func hasWords(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0
}

// Synthesize speaks text and returns it as an Ogg/Opus voice part (Data set, Duration
// probed). voice and language override the configured ones when not empty.
func (t *TTS) Synthesize(ctx context.Context, text, voice, language string) (channels.Part, error) {
	if voice == "" {
		voice = t.cfg.Voice
	}
	if language == "" {
		language = t.cfg.Language
	}
	work, err := os.MkdirTemp(t.opts.TempDir, "tts-")
	if err != nil {
		return channels.Part{}, fmt.Errorf("tts: %w", err)
	}
	defer os.RemoveAll(work)

	// A slot is held for the work done here (a local program, the conversion), not while
	// a speech service is awaited: a slow answer for one chat must not hold up the others.
	acquire := func() error {
		if err := t.slots.Acquire(ctx); err != nil {
			return fmt.Errorf("tts: waiting for a free slot: %w", err)
		}
		return nil
	}
	var raw string // the provider's audio, any format
	switch t.cfg.Provider {
	case "command":
		if err := acquire(); err != nil {
			return channels.Part{}, err
		}
		defer t.slots.Release()
		raw, err = t.viaCommand(ctx, work, text, voice, language)
	default:
		if raw, err = t.viaOpenAI(ctx, work, text, voice); err == nil {
			if err := acquire(); err != nil {
				return channels.Part{}, err
			}
			defer t.slots.Release()
		}
	}
	if err != nil {
		return channels.Part{}, err
	}
	prep, cancel := context.WithTimeout(ctx, convertBudget)
	defer cancel()
	ogg := raw
	if !isOggOpusFile(raw) {
		ogg = filepath.Join(work, "voice.ogg")
		if err := audio.ToOggOpus(prep, raw, ogg); err != nil {
			return channels.Part{}, fmt.Errorf("tts: converting the %s audio to Ogg/Opus: %w", t.cfg.Provider, err)
		}
	}
	info, err := audio.Probe(prep, ogg)
	if err != nil {
		return channels.Part{}, fmt.Errorf("tts: the speech audio is unusable: %w", err)
	}
	if info.Duration <= 0 {
		return channels.Part{}, errors.New("tts: the speech audio is empty")
	}
	data, err := os.ReadFile(ogg)
	if err != nil {
		return channels.Part{}, fmt.Errorf("tts: %w", err)
	}
	return channels.Part{
		Type:     channels.PartAudio,
		MIME:     "audio/ogg",
		Data:     data,
		Name:     "voice.ogg",
		Size:     int64(len(data)),
		Duration: info.Duration.Seconds(),
		Voice:    true,
	}, nil
}

func isOggOpusFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 27+255+8)
	n, _ := io.ReadFull(f, head)
	return audio.IsOggOpus(head[:n])
}

func (t *TTS) viaOpenAI(ctx context.Context, work, text, voice string) (string, error) {
	callCtx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	resp, err := t.api.Speech.New(callCtx, openai.AudioSpeechNewParams{
		Input:          text,
		Model:          t.cfg.Model,
		Voice:          openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String(voice)},
		ResponseFormat: openai.AudioSpeechNewParamsResponseFormatOpus,
	})
	if err != nil {
		if callCtx.Err() != nil && ctx.Err() == nil {
			return "", fmt.Errorf("tts: the speech service did not answer within %s: %w", t.cfg.Timeout, err)
		}
		return "", fmt.Errorf("tts: speech service: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAudioBytes+1))
	if err != nil {
		return "", fmt.Errorf("tts: reading the speech audio: %w", err)
	}
	if len(data) > maxAudioBytes {
		return "", fmt.Errorf("tts: the speech service sent more than %d bytes", maxAudioBytes)
	}
	if len(data) == 0 {
		return "", errors.New("tts: the speech service sent no audio")
	}
	path := filepath.Join(work, "speech")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("tts: %w", err)
	}
	return path, nil
}

func (t *TTS) viaCommand(ctx context.Context, work, text, voice, language string) (string, error) {
	textFile := filepath.Join(work, "text.txt")
	if err := os.WriteFile(textFile, []byte(text), 0o600); err != nil {
		return "", fmt.Errorf("tts: %w", err)
	}
	output := filepath.Join(work, "speech."+t.cfg.OutputFormat)
	toFile := false
	argv := make([]string, len(t.cfg.Command))
	for i, a := range t.cfg.Command {
		if strings.Contains(a, "{output}") {
			toFile = true
		}
		inline := text
		if a == "{text}" && strings.HasPrefix(text, "-") {
			inline = " " + text // so the program does not take the reply for an option
		}
		argv[i] = strings.NewReplacer("{text_file}", textFile, "{text}", inline, "{output}", output,
			"{voice}", voice, "{language}", language).Replace(a)
	}
	max := int64(0)
	if !toFile {
		max = maxAudioBytes
	}
	out, err := audio.Run(ctx, audio.Cmd{Argv: argv, Stdin: strings.NewReader(text), Timeout: t.cfg.Timeout, MaxStdout: max})
	if err != nil {
		return "", fmt.Errorf("tts: %w", err)
	}
	if !toFile {
		if err := os.WriteFile(output, out, 0o600); err != nil {
			return "", fmt.Errorf("tts: %w", err)
		}
	}
	st, err := os.Stat(output)
	if err != nil || st.Size() == 0 {
		return "", fmt.Errorf("tts: %s wrote no audio", t.cfg.Command[0])
	}
	return output, nil
}
