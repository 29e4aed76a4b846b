package telegram

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"gateway/channels"
	"gateway/internal/secret"
)

// Modes of receiving updates.
const (
	ModePolling = "polling"
	ModeWebhook = "webhook"
)

// DefaultAPIURL is Telegram's Bot API server.
const DefaultAPIURL = "https://api.telegram.org"

// DefaultMaxFileBytes is the largest media file downloaded from users, Telegram's own
// getFile limit.
const DefaultMaxFileBytes = 20 << 20

// WebhookPath is where webhook mode serves Telegram's POSTs on the gateway's listener.
const WebhookPath = "/telegram/webhook"

// Config is channels.telegram in the gateway's configuration.
type Config struct {
	Enabled bool          `mapstructure:"enabled"`
	Token   secret.Secret `mapstructure:"token"`
	APIURL  string        `mapstructure:"api_url"`
	Mode    string        `mapstructure:"mode"` // polling (default) or webhook
	// WebhookSecret is checked against X-Telegram-Bot-Api-Secret-Token on every webhook POST.
	WebhookSecret secret.Secret `mapstructure:"webhook_secret"`
	// WebhookURL is the public https URL Telegram should POST to (ending in /telegram/webhook).
	// When set, Start registers it with setWebhook; when empty in webhook mode the admin
	// registers it (with the same secret) and Start leaves Telegram's setting alone.
	WebhookURL      string `mapstructure:"webhook_url"`
	MaxFileBytes    int64  `mapstructure:"max_file_bytes"`
	channels.Access `mapstructure:",squash"`
}

// Validate reports the first problem with the configuration, naming its key.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	if !c.Token.IsSet() {
		errs = append(errs, errors.New("channels.telegram.token is required when channels.telegram.enabled is true (the token @BotFather gave you)"))
	}
	if c.APIURL != "" {
		if u, err := url.Parse(c.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("channels.telegram.api_url: %q is not an http(s) URL", c.APIURL))
		}
	}
	switch c.Mode {
	case "", ModePolling:
	case ModeWebhook:
		if !c.WebhookSecret.IsSet() {
			errs = append(errs, errors.New("channels.telegram.webhook_secret is required in webhook mode, so that only Telegram can post updates"))
		} else if !validWebhookSecret(c.WebhookSecret.Reveal()) {
			// Telegram's setWebhook refuses it, and run would stop at start: a secret made
			// with `openssl rand -base64` has +, / and =. The value is not shown.
			errs = append(errs, errors.New("channels.telegram.webhook_secret: Telegram takes only 1-256 characters A-Z, a-z, 0-9, _ and - (e.g. openssl rand -hex 32)"))
		}
		if c.WebhookURL != "" {
			if u, err := url.Parse(c.WebhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, fmt.Errorf("channels.telegram.webhook_url: %q is not an http(s) URL", c.WebhookURL))
			} else if u.Scheme != "https" && (c.APIURL == "" || c.APIURL == DefaultAPIURL) {
				// Telegram's own Bot API posts only to HTTPS (a local Bot API server, named
				// by api_url, may post to plain HTTP).
				errs = append(errs, errors.New("channels.telegram.webhook_url: Telegram posts updates only to an https:// URL"))
			}
		}
	default:
		errs = append(errs, fmt.Errorf("channels.telegram.mode: %q is not one of polling, webhook", c.Mode))
	}
	if c.MaxFileBytes < 0 {
		errs = append(errs, fmt.Errorf("channels.telegram.max_file_bytes: %d is negative", c.MaxFileBytes))
	}
	errs = append(errs, c.Access.Validate(Name, validUserID,
		"a Telegram user id is a positive number: usernames can change, ids cannot; a group's id is negative and lets no one in, so list its members"))
	return errors.Join(errs...)
}

// validWebhookSecret reports whether s is a secret_token setWebhook accepts.
func validWebhookSecret(s string) bool {
	if len(s) == 0 || len(s) > 256 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// validUserID reports whether id is a Telegram user id, a positive number. A group's id
// (negative) matches no sender: the bot would stay silent in the group it names.
func validUserID(id string) bool {
	n, err := strconv.ParseInt(id, 10, 64)
	return err == nil && n > 0
}

// WithDefaults is cfg as the adapter runs it: each key that is not set takes its default.
func (c Config) WithDefaults() Config {
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	if c.Mode == "" {
		c.Mode = ModePolling
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
	c.Access = c.Access.WithDefaults()
	return c
}

// Options are the adapter's non-config dependencies and tuning. Zero values mean the
// defaults that suit the real Telegram.
type Options struct {
	Logger     *slog.Logger
	StateDir   string       // required: the update offset and downloaded media live under StateDir/telegram
	HTTPClient *http.Client // for every Bot API call and download; timeouts come from contexts
	Pacing     Pacing
	// State keeps the update offset durably across restarts (the state file's cursors);
	// nil keeps it in a file under StateDir/telegram.
	State channels.State
	// Budget, when set, is the bot's send rate shared with other gateway processes (cluster
	// mode): every send to a chat takes it, after this process's own pace (Pacing).
	Budget channels.Budget
	// Holder, when set, lets one gateway process at a time poll (cluster mode): polling runs
	// only while this process holds "conn.telegram.<bot id>", and the others keep asking.
	// Every process sends. Webhook mode ignores it: any process takes Telegram's POSTs.
	Holder channels.Holder

	PollTimeout    time.Duration // long-poll wait of one getUpdates (default 30s)
	Watchdog       time.Duration // restart polling that completed nothing for this long (default 2×PollTimeout+30s)
	EditInterval   time.Duration // least time between streaming edits (default 1s)
	TypingInterval time.Duration // typing indicator refresh (default 4s; Telegram shows it ~5s)
	MediaTTL       time.Duration // downloaded media older than this is deleted (default 24h)
}

// Pacing is the outbound limiter's tuning. Zero means Telegram's limits; a negative value
// turns that limit off (for benchmarks against the fake only).
type Pacing struct {
	GlobalPerSecond float64       // sends per second for the whole bot (default 30)
	PerChatInterval time.Duration // least time between sends to one private chat (default 1s)
	GroupInterval   time.Duration // least time between sends to one group (default 3s: 20 a minute)
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HTTPClient == nil {
		// A backstop only: every call also carries its own deadline. Its own transport, so
		// that Stop closing its idle connections touches no one else's.
		o.HTTPClient = &http.Client{Timeout: 10 * time.Minute, Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if o.PollTimeout <= 0 {
		o.PollTimeout = 30 * time.Second
	}
	if o.Watchdog <= 0 {
		o.Watchdog = 2*o.PollTimeout + 30*time.Second
	}
	if o.EditInterval <= 0 {
		o.EditInterval = time.Second
	}
	if o.TypingInterval <= 0 {
		o.TypingInterval = 4 * time.Second
	}
	if o.MediaTTL <= 0 {
		o.MediaTTL = 24 * time.Hour
	}
	if o.Pacing.GlobalPerSecond == 0 {
		o.Pacing.GlobalPerSecond = 30
	}
	if o.Pacing.PerChatInterval == 0 {
		o.Pacing.PerChatInterval = time.Second
	}
	if o.Pacing.GroupInterval == 0 {
		o.Pacing.GroupInterval = 3 * time.Second
	}
	return o
}

// BotID is the bot's numeric id, the part of its token before the colon: it names the bot
// (in shared state) without revealing the token.
func BotID(token string) string {
	if id, _, ok := strings.Cut(token, ":"); ok {
		return id
	}
	sum := sha256.Sum256([]byte(token)) // not a Bot API token: name it without showing it
	return hex.EncodeToString(sum[:6])
}
