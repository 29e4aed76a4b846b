package tts

import (
	"slices"
	"strings"
	"time"

	"gateway/builtins/internal/speech"
	"gateway/internal/secret"
)

// Config is the `tts:` section of the gateway config.
type Config struct {
	// Mode says when replies are spoken: off (never, and the hook is not loaded), inbound
	// (when the user spoke; the default) or always. A chat's or profile's mode
	// (MessageSend.TTSMode) wins over it, unless this is off.
	Mode string
	// Provider is "openai" (any OpenAI-compatible /audio/speech endpoint) or "command".
	Provider string
	Model    string
	Voice    string
	BaseURL  string        `mapstructure:"base_url"`
	APIKey   secret.Secret `mapstructure:"api_key"`
	// Command is the argument list of the command provider. Placeholders: {text} (the text
	// as one argument), {text_file} (a file holding it), {output} (the audio file to write;
	// without it, stdout is the audio), {voice}, {language}. The text is also on stdin.
	Command []string
	// OutputFormat is what Command writes: wav (default), mp3, ogg, opus, flac, aiff or au.
	OutputFormat string `mapstructure:"output_format"`
	// MaxChars caps the spoken text (the full reply still goes as text).
	MaxChars int `mapstructure:"max_chars"`
	// Timeout bounds one synthesis by the provider.
	Timeout  time.Duration
	Language string
}

// Modes.
const (
	ModeOff     = "off"
	ModeInbound = "inbound"
	ModeAlways  = "always"
)

// Defaults.
const (
	DefaultModel        = "tts-1"
	DefaultVoice        = "alloy"
	DefaultMaxChars     = 1000
	DefaultTimeout      = 60 * time.Second
	DefaultOutputFormat = "wav"
)

// DefaultConfig is the configuration used when the config file says nothing.
func DefaultConfig() Config {
	return Config{
		Mode:     ModeInbound,
		Provider: "openai",
		Model:    DefaultModel,
		Voice:    DefaultVoice,
		MaxChars: DefaultMaxChars,
		Timeout:  DefaultTimeout,
	}
}

// WithDefaults is c as the hook runs it: each zero value that has a default takes it.
func (c Config) WithDefaults() Config {
	if c.Mode == "" {
		c.Mode = ModeInbound
	}
	if c.Provider == "" {
		c.Provider = "openai"
	}
	if c.Provider == "openai" {
		if c.Model == "" {
			c.Model = DefaultModel
		}
		if c.Voice == "" {
			c.Voice = DefaultVoice
		}
	}
	if c.OutputFormat == "" {
		c.OutputFormat = DefaultOutputFormat
	}
	if c.MaxChars == 0 {
		c.MaxChars = DefaultMaxChars
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

func outputFormatOK(f string) bool {
	switch f {
	case "wav", "mp3", "ogg", "opus", "flac", "aiff", "au":
		return true
	}
	return false
}

// ValidMode reports whether m is a mode ("" included: the configured one).
func ValidMode(m string) bool {
	return m == "" || m == ModeOff || m == ModeInbound || m == ModeAlways
}

// Validate checks the settings and names the key of each problem.
func (c Config) Validate() error {
	p := speech.NewProblems("tts")
	if !ValidMode(c.Mode) {
		p.Add("mode", "%q is not a mode (want off, inbound or always)", c.Mode)
	}
	if c.Mode == ModeOff {
		return p.Err()
	}
	p.Provider(c.Provider, c.Command, `[espeak-ng, -w, "{output}", -f, "{text_file}"]`)
	if c.Provider == speech.Command && c.Voice == "" &&
		slices.ContainsFunc(c.Command, func(a string) bool { return strings.Contains(a, "{voice}") }) {
		p.Add("voice", "must be set when tts.command uses {voice}")
	}
	p.BaseURL(c.BaseURL)
	if c.OutputFormat != "" && !outputFormatOK(c.OutputFormat) {
		p.Add("output_format", "%q is not a format (want wav, mp3, ogg, opus, flac, aiff or au)", c.OutputFormat)
	}
	if c.MaxChars < 0 {
		p.Add("max_chars", "must not be negative")
	}
	if c.Timeout < 0 {
		p.Add("timeout", "must not be negative")
	}
	return p.Err()
}
