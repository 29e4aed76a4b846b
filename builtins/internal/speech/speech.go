// Package speech is what the stt and tts builtins share: the choice between an
// OpenAI-compatible endpoint and a local program, the checks of those keys, the client,
// and the bound on audio work running at once.
package speech

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"gateway/internal/audio"
	"gateway/internal/secret"
)

// Providers.
const (
	OpenAI  = "openai"  // any OpenAI-compatible endpoint
	Command = "command" // a local program
)

// Provider is the part of an stt: or tts: section that picks and reaches the provider.
type Provider struct {
	Name       string   // OpenAI or Command
	Command    []string // the command provider's argument list
	BaseURL    string
	APIKey     secret.Secret
	HTTPClient *http.Client // nil: the SDK's default
}

// Setup checks that the programs p needs exist (ffmpeg and ffprobe, and the command's
// program), so that a broken setup fails at startup rather than at the first voice note,
// and returns the audio client of the openai provider (the zero service for a command).
//
// The client is made from p alone: openai.NewClient would also read OPENAI_API_KEY,
// OPENAI_BASE_URL, OPENAI_ORG_ID and OPENAI_CUSTOM_HEADERS from the environment, and send
// that key or those headers to whatever server base_url names (a local Whisper server).
// The config decides which key goes where (the environment's key only to OpenAI's own API).
func Setup(p Provider) (openai.AudioService, error) {
	tools := []string{"ffmpeg", "ffprobe"}
	if p.Name == Command {
		tools = append(tools, p.Command[0])
	}
	if err := audio.CheckTools(tools...); err != nil {
		return openai.AudioService{}, err
	}
	if p.Name != OpenAI {
		return openai.AudioService{}, nil
	}
	base := p.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	client := p.HTTPClient
	if client == nil {
		client = &http.Client{}
	}
	ropts := []option.RequestOption{option.WithBaseURL(base), option.WithHTTPClient(client), option.WithMaxRetries(1)}
	if p.APIKey.IsSet() {
		ropts = append(ropts, option.WithAPIKey(p.APIKey.Reveal()))
	}
	return openai.NewAudioService(ropts...), nil
}

// DefaultBaseURL is OpenAI's API, where an openai provider without base_url goes.
const DefaultBaseURL = "https://api.openai.com/v1/"

// Slots bounds the audio jobs running at once: a burst queues here instead of starting
// a converter each.
type Slots chan struct{}

// NewSlots allows one job per CPU, and at least two.
func NewSlots() Slots { return make(Slots, max(2, runtime.NumCPU())) }

// Acquire waits for a free slot, or returns ctx's error.
func (s Slots) Acquire(ctx context.Context) error {
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release frees a slot taken by Acquire.
func (s Slots) Release() { <-s }

// Problems collects the problems of one config section, each naming its key.
type Problems struct {
	section string
	errs    []error
}

// NewProblems collects problems of the section named section (stt, tts).
func NewProblems(section string) *Problems { return &Problems{section: section} }

// Add records a problem with key.
func (p *Problems) Add(key, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s.%s: %s", p.section, key, fmt.Sprintf(format, args...)))
}

// Err joins the problems; nil when there are none.
func (p *Problems) Err() error { return errors.Join(p.errs...) }

// Provider checks provider and command: the provider is openai ("" included) or command,
// only the command provider takes a command, and it needs one (example shows a working
// one). It reports whether the provider is command with a program named, so that the
// caller can check the arguments its section needs.
func (p *Problems) Provider(name string, command []string, example string) bool {
	switch name {
	case "", OpenAI:
		if len(command) > 0 {
			p.Add("command", "is only used with provider: command (provider is openai)")
		}
	case Command:
		if len(command) == 0 || strings.TrimSpace(command[0]) == "" {
			p.Add("command", "is required with provider: command (e.g. %s)", example)
			return false
		}
		return true
	default:
		p.Add("provider", "%q is not a provider (want openai or command)", name)
	}
	return false
}

// BaseURL checks that base_url, when set, is an http(s) URL.
func (p *Problems) BaseURL(u string) {
	if u == "" {
		return
	}
	if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		p.Add("base_url", "%q is not an http(s) URL", u)
	}
}
