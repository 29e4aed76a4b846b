package stt

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

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
	// EchoTranscript asks the gateway to show the user what was heard.
	EchoTranscript bool `mapstructure:"echo_transcript"`
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

// withDefaults fills the zero values that have a default.
func (c Config) withDefaults() Config {
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
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("stt.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	switch c.Provider {
	case "", "openai":
		if len(c.Command) > 0 {
			bad("command", "is only used with provider: command (provider is openai)")
		}
	case "command":
		switch {
		case len(c.Command) == 0 || strings.TrimSpace(c.Command[0]) == "":
			bad("command", "is required with provider: command (e.g. [pocketsphinx_continuous, -infile, \"{input}\", -logfn, /dev/null])")
		case !slices.ContainsFunc(c.Command, func(a string) bool { return strings.Contains(a, "{input}") }):
			bad("command", "must contain {input}, where the audio file goes")
		}
	default:
		bad("provider", "%q is not a provider (want openai or command)", c.Provider)
	}
	if c.BaseURL != "" {
		if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("base_url", "%q is not an http(s) URL", c.BaseURL)
		}
	}
	if c.MaxBytes < 0 {
		bad("max_bytes", "must not be negative")
	}
	if c.MaxDuration < 0 {
		bad("max_duration", "must not be negative")
	}
	if c.Timeout < 0 {
		bad("timeout", "must not be negative")
	}
	switch c.InputFormat {
	case "", InputWAV, InputOgg, InputOriginal:
	default:
		bad("input_format", "%q is not a format (want wav, ogg or original)", c.InputFormat)
	}
	return errors.Join(errs...)
}
