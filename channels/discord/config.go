package discord

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"gateway/channels"
	"gateway/internal/secret"
)

// DefaultMaxFileBytes bounds one inbound attachment when max_file_bytes is 0.
const DefaultMaxFileBytes = 20_000_000

// Config is channels.discord.
type Config struct {
	Enabled bool          `mapstructure:"enabled"`
	Token   secret.Secret `mapstructure:"token"`
	// APIURL replaces https://discord.com for every REST call ("" = Discord itself). A fake
	// or a REST proxy answers GET /api/v9/gateway with the WebSocket URL to use.
	APIURL       string `mapstructure:"api_url"`
	MaxFileBytes int64  `mapstructure:"max_file_bytes"` // 0: DefaultMaxFileBytes
	// AllowBots lets other bots talk to this one. A guard stops two bots answering each
	// other forever: after BotStreak bot messages in a row in one chat, bots are ignored
	// there until a human writes.
	AllowBots       bool `mapstructure:"allow_bots"`
	channels.Access `mapstructure:",squash"`
}

// Validate reports the first bad setting (every bad access entry at once), naming its key.
func (c Config) Validate() error {
	if c.APIURL != "" {
		u, err := url.Parse(c.APIURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("channels.discord.api_url: want an http(s) base URL such as http://127.0.0.1:8081, got %q", c.APIURL)
		}
	}
	if c.MaxFileBytes < 0 {
		return fmt.Errorf("channels.discord.max_file_bytes: must be 0 (default %d) or more, got %d", DefaultMaxFileBytes, c.MaxFileBytes)
	}
	if err := c.Access.Validate(Name, validUserID, "a Discord user id is a number; enable Developer Mode and use Copy User ID"); err != nil {
		return err
	}
	if !c.Enabled {
		return nil
	}
	tok := c.token()
	switch {
	case tok == "":
		return fmt.Errorf("channels.discord.token is required when channels.discord.enabled is true")
	case strings.ContainsAny(tok, " \t\r\n"):
		return fmt.Errorf("channels.discord.token contains spaces or line breaks; paste the bot token alone")
	}
	return nil
}

// token is the raw bot token; a "Bot " prefix pasted from Discord's docs is accepted.
func (c Config) token() string {
	t := strings.TrimSpace(c.Token.Reveal())
	return strings.TrimSpace(strings.TrimPrefix(t, "Bot "))
}

// WithDefaults is cfg as the adapter runs it: each key that is not set takes its default
// (api_url stays empty: Discord itself).
func (c Config) WithDefaults() Config {
	c.MaxFileBytes = c.maxFileBytes()
	c.Access = c.Access.WithDefaults()
	return c
}

func (c Config) maxFileBytes() int64 {
	if c.MaxFileBytes == 0 {
		return DefaultMaxFileBytes
	}
	return c.MaxFileBytes
}

// validUserID says whether id is a Discord user id: a snowflake, written as a number.
func validUserID(id string) bool {
	_, err := strconv.ParseUint(id, 10, 64)
	return err == nil
}
