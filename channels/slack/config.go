package slack

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	slackgo "github.com/slack-go/slack"

	"gateway/channels"
	"gateway/internal/secret"
)

// Modes of receiving events.
const (
	ModeSocket = "socket" // Socket Mode: the adapter dials Slack (default; needs app_token)
	ModeEvents = "events" // Events API: Slack POSTs to EventsPath on the gateway's listener
)

// EventsPath is where the Events API mode serves Slack's requests.
const EventsPath = "/slack/events"

// CommandsPath is where the Events API mode takes slash commands (the Request URL of
// each command in the Slack app); in socket mode they come over the socket.
const CommandsPath = "/slack/commands"

// DefaultMaxFileBytes bounds a downloaded user file when max_file_bytes is unset.
const DefaultMaxFileBytes = 20 << 20

// Config is channels.slack.
type Config struct {
	Enabled       bool          `mapstructure:"enabled"`
	BotToken      secret.Secret `mapstructure:"bot_token"`
	AppToken      secret.Secret `mapstructure:"app_token"`
	SigningSecret secret.Secret `mapstructure:"signing_secret"`
	// APIURL is the Web API base (default https://slack.com/api/); it must end with "/".
	APIURL string `mapstructure:"api_url"`
	// Mode is socket (default) or events.
	Mode string `mapstructure:"mode"`
	// MaxFileBytes bounds each file a user sends (default 20 MB); larger files are refused
	// with a reply.
	MaxFileBytes    int64 `mapstructure:"max_file_bytes"`
	channels.Access `mapstructure:",squash"`
}

// Options are the adapter's dependencies.
type Options struct {
	Logger     *slog.Logger
	StateDir   string       // downloaded files go under StateDir/slack/files
	HTTPClient *http.Client // for the Web API and file transfers; default has a 60s timeout
	// State keeps the threads the bot answered in across restarts; nil keeps them in
	// memory only.
	State channels.State
}

// Validate checks the config of an enabled channel; errors name the key to fix.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	return c.validate()
}

func (c Config) validate() error {
	var errs []error
	switch {
	case !c.BotToken.IsSet():
		errs = append(errs, errors.New("channels.slack.bot_token is required (the bot token, xoxb-...)"))
	case !strings.HasPrefix(c.BotToken.Reveal(), "xoxb-"):
		errs = append(errs, errors.New("channels.slack.bot_token must be a bot token starting with xoxb-"))
	}
	switch c.mode() {
	case ModeSocket:
		switch {
		case !c.AppToken.IsSet():
			errs = append(errs, errors.New("channels.slack.app_token is required in socket mode (an app-level token, xapp-..., with connections:write)"))
		case !strings.HasPrefix(c.AppToken.Reveal(), "xapp-"):
			errs = append(errs, errors.New("channels.slack.app_token must be an app-level token starting with xapp-"))
		}
	case ModeEvents:
		if !c.SigningSecret.IsSet() {
			errs = append(errs, errors.New("channels.slack.signing_secret is required in events mode (Basic Information > Signing Secret)"))
		}
	default:
		errs = append(errs, fmt.Errorf("channels.slack.mode is %q; use %q or %q", c.Mode, ModeSocket, ModeEvents))
	}
	if c.APIURL != "" {
		u, err := url.Parse(c.APIURL)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			errs = append(errs, fmt.Errorf("channels.slack.api_url %q is not an http(s) URL", c.APIURL))
		case !strings.HasSuffix(c.APIURL, "/"):
			errs = append(errs, fmt.Errorf("channels.slack.api_url %q must end with \"/\"", c.APIURL))
		}
	}
	if c.MaxFileBytes < 0 {
		errs = append(errs, fmt.Errorf("channels.slack.max_file_bytes is %d; it must be 0 (default 20 MB) or more", c.MaxFileBytes))
	}
	errs = append(errs, c.Access.Validate(Name, validUserID, userIDHint))
	return errors.Join(errs...)
}

// userIDHint tells the admin where to find a Slack user id.
const userIDHint = "Slack user ids are capital letters and digits, like U0123ABCD: open the person's profile, then ⋮ > Copy member ID; " +
	"ids starting with C, G or D name channels and let no one in"

// validUserID reports whether id has the form of a Slack user id: capital letters and
// digits (U0123ABCD, W0123ABCD on Enterprise Grid), never a name or an @handle, nor a
// channel's id (C..., G..., D...), which matches no sender.
func validUserID(id string) bool {
	if id == "" || strings.ContainsRune("CGD", rune(id[0])) {
		return false
	}
	for _, r := range id {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// WithDefaults is cfg as the adapter runs it: each key that is not set takes its default.
func (c Config) WithDefaults() Config {
	if c.APIURL == "" {
		c.APIURL = slackgo.APIURL
	}
	c.Mode = c.mode()
	c.MaxFileBytes = c.maxFileBytes()
	c.Access = c.Access.WithDefaults()
	return c
}

func (c Config) mode() string {
	if c.Mode == "" {
		return ModeSocket
	}
	return c.Mode
}

func (c Config) maxFileBytes() int64 {
	if c.MaxFileBytes == 0 {
		return DefaultMaxFileBytes
	}
	return c.MaxFileBytes
}
