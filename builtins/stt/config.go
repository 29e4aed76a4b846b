package stt

import (
	"slices"
	"strings"
	"time"

	"gateway/builtins/internal/speech"
	"gateway/internal/secret"
)

// Config is the `stt:` section of the gateway config.
type Config struct {
	Enabled bool
	// Provider is "openai" (any OpenAI-compatible /audio/transcriptions endpoint) or
	// "command" (a local program; its stdout is the transcript).
	Provider string
	Model    string
	BaseURL  string        `mapstructure:"base_url"`
	APIKey   secret.Secret `mapstructure:"api_key"`
	// MaxBytes and MaxDuration bound the audio accepted (0: defaults).
	MaxBytes    int64         `mapstructure:"max_bytes"`
	MaxDuration time.Duration `mapstructure:"max_duration"`
	// Timeout bounds one transcription by the provider (0: default).
	Timeout time.Duration
	// Command is the argument list of the command provider: {input} is the audio file
	// (in InputFormat), {language} the language hint.
	Command []string
	// InputFormat is what Command reads: wav (16 kHz mono 16-bit PCM, the default), ogg
	// (Ogg/Opus) or original (the file as the user sent it).
	InputFormat string `mapstructure:"input_format"`
	// Language is the spoken language hint (ISO-639-1, "" = auto); a profile's language
	// (MessageReceive.Language) wins over it.
	Language string
}

// Defaults.
const (
	DefaultModel       = "whisper-1"
	DefaultMaxBytes    = 20_000_000
	DefaultMaxDuration = 5 * time.Minute
	DefaultTimeout     = 60 * time.Second
)

// Input formats of the command provider.
const (
	InputWAV      = "wav"
	InputOgg      = "ogg"
	InputOriginal = "original"
)

// DefaultConfig is the configuration used when the config file says nothing.
func DefaultConfig() Config {
	return Config{
		Enabled:     true,
		Provider:    "openai",
		Model:       DefaultModel,
		MaxBytes:    DefaultMaxBytes,
		MaxDuration: DefaultMaxDuration,
		Timeout:     DefaultTimeout,
	}
}

// WithDefaults is c as the hook runs it: each zero value that has a default takes it.
func (c Config) WithDefaults() Config {
	if c.Provider == "" {
		c.Provider = "openai"
	}
	if c.Model == "" && c.Provider == "openai" {
		c.Model = DefaultModel
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxDuration == 0 {
		c.MaxDuration = DefaultMaxDuration
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.InputFormat == "" {
		c.InputFormat = InputWAV
	}
	return c
}

// Validate checks the settings and names the key of each problem. A disabled section is
// not checked.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	p := speech.NewProblems("stt")
	if p.Provider(c.Provider, c.Command, `[pocketsphinx_continuous, -infile, "{input}", -logfn, /dev/null]`) &&
		!slices.ContainsFunc(c.Command, func(a string) bool { return strings.Contains(a, "{input}") }) {
		p.Add("command", "must contain {input}, where the audio file goes")
	}
	p.BaseURL(c.BaseURL)
	if c.MaxBytes < 0 {
		p.Add("max_bytes", "must not be negative")
	}
	if c.MaxDuration < 0 {
		p.Add("max_duration", "must not be negative")
	}
	if c.Timeout < 0 {
		p.Add("timeout", "must not be negative")
	}
	switch c.InputFormat {
	case "", InputWAV, InputOgg, InputOriginal:
	default:
		p.Add("input_format", "%q is not a format (want wav, ogg or original)", c.InputFormat)
	}
	return p.Err()
}
