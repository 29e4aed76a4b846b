// Package slack is the Slack channel adapter, on slack-go. It receives events by Socket
// Mode (default) or the Events API over the gateway's HTTP listener, and answers in the
// thread of the message it answers, streaming by chat.update.
package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	slackgo "github.com/slack-go/slack"

	"gateway/channels"
	"gateway/internal/pace"
)

// Name is the adapter's channel name.
const Name = "slack"

// MaxTextLen is the length, in characters, at which a message is split.
const MaxTextLen = 4000

const (
	callTimeout     = 30 * time.Second // one Web API call
	transferTimeout = 2 * time.Minute  // one file download or upload
	deliverTimeout  = 30 * time.Second // Sink.Deliver
	editInterval    = time.Second      // least time between two edits of a streaming answer
	dedupSize       = 10_000
	threadSetSize   = 10_000
)

var (
	_ channels.Channel     = (*Channel)(nil)
	_ channels.HTTPChannel = (*Channel)(nil)
)

// Channel is the Slack adapter. It is safe for concurrent use.
type Channel struct {
	cfg      Config
	log      *slog.Logger
	dir      string
	api      *slackgo.Client
	pacer    *pace.Pacer
	claims   *claims
	threads  *boundedSet // channel:thread_ts the bot answered in: replies there need no mention
	noStatus *boundedSet // channels where assistant.threads.setStatus was refused
	names    *names      // authors' display names
	// lastThread is, by channel:user, the thread of the user's latest conversation with
	// the bot in a channel: a slash command there (never typed in a thread) acts on it.
	lastThread *boundedMap[string]
	// commands are the slash commands delivered lately, by message id: their replies go
	// to the user alone.
	commands *boundedMap[slashInfo]
	secrets  []string

	mu      sync.Mutex
	state   int // stateNew, stateRunning, stateStopped
	sink    channels.Sink
	botUser string
	mention *regexp.Regexp // <@botUser> and <@botUser|name> in message text
	up      bool
	cancel  context.CancelFunc
	runCtx  context.Context
	wg      sync.WaitGroup
	pruned  time.Time
	connErr error // the last Socket Mode connection failure, for Start's error
}

const (
	stateNew = iota
	stateRunning
	stateStopped
)

// New returns an adapter for cfg, not yet started.
func New(cfg Config, opts Options) (*Channel, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.APIURL == "" {
		cfg.APIURL = slackgo.APIURL
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeSocket
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("channel", Name)
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	dir := opts.StateDir
	if dir == "" {
		dir = os.TempDir()
	}
	c := &Channel{
		cfg:      cfg,
		log:      log,
		dir:      filepath.Join(dir, "slack", "files"),
		pacer:    pace.New(pace.Limits{Global: 10, GlobalBurst: 20, PerKey: 1, PerKeyBurst: 3}),
		claims:   newClaims(dedupSize),
		threads:  newBoundedSet(threadSetSize),
		noStatus: newBoundedSet(1000),

		lastThread: newBoundedMap[string](threadSetSize),
		commands:   newBoundedMap[slashInfo](1000),
	}
	for _, s := range []string{cfg.BotToken.Reveal(), cfg.AppToken.Reveal(), cfg.SigningSecret.Reveal()} {
		if s != "" {
			c.secrets = append(c.secrets, s)
		}
	}
	c.api = slackgo.New(cfg.BotToken.Reveal(),
		slackgo.OptionHTTPClient(hc),
		slackgo.OptionAPIURL(cfg.APIURL),
		slackgo.OptionAppLevelToken(cfg.AppToken.Reveal()),
		slackgo.OptionLog(libLog{c}),
	)
	// users.info is a read, not a send: it is left out of the send pacer, and a rate limit
	// on it pauses the lookups instead (see names).
	c.names = newNames(func(ctx context.Context, id string) (*slackgo.User, error) {
		return c.api.GetUserInfoContext(ctx, id, slackgo.GetUserInfoOptionIncludeLocale(false))
	}, log, c.redact)
	if cfg.DMPolicy != channels.DMOpen && len(cfg.AllowFrom) == 0 {
		log.Warn("channels.slack.allow_from is empty: nobody may talk to the bot; add Slack user ids or set dm_policy: open")
	}
	return c, nil
}

// Name is "slack".
func (c *Channel) Name() string { return Name }

// Start checks the bot token with auth.test and, in socket mode, returns once the Socket
// Mode connection is open. In events mode the adapter then takes requests on EventsPath.
func (c *Channel) Start(ctx context.Context, sink channels.Sink) error {
	c.mu.Lock()
	if c.state != stateNew {
		c.mu.Unlock()
		return errors.New("slack: Start called twice or after Stop")
	}
	c.state = stateRunning
	c.mu.Unlock()

	user, err := c.authTest(ctx)
	if err != nil {
		c.setStopped()
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c.mu.Lock()
	if c.state != stateRunning { // Stop came while auth.test ran
		c.mu.Unlock()
		cancel()
		return errors.New("slack: stopped while starting")
	}
	c.sink, c.botUser, c.runCtx, c.cancel = sink, user, runCtx, cancel
	c.mention = regexp.MustCompile(`<@` + regexp.QuoteMeta(user) + `(\|[^>]*)?>`)
	c.mu.Unlock()
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		cancel()
		c.setStopped()
		return fmt.Errorf("slack: cannot create the download directory: %w", err)
	}
	c.prune()

	if c.cfg.mode() == ModeEvents {
		c.setUp(true, nil)
		c.log.Info("slack: ready for Events API requests", "path", EventsPath, "bot_user", user)
		return nil
	}
	ready := make(chan error, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.runSocket(runCtx, ready)
	}()
	select {
	case err := <-ready:
		if err != nil {
			cancel()
			c.wg.Wait()
			c.setStopped()
			return err
		}
		return nil
	case <-runCtx.Done():
		c.wg.Wait()
		return errors.New("slack: stopped while starting")
	case <-ctx.Done():
		cancel()
		c.wg.Wait()
		c.setStopped()
		c.mu.Lock()
		last := c.connErr
		c.mu.Unlock()
		if last != nil {
			return fmt.Errorf("slack: Socket Mode did not connect in time (last error: %v): %w", last, ctx.Err())
		}
		return fmt.Errorf("slack: Socket Mode did not connect in time: %w", ctx.Err())
	}
}

func (c *Channel) setStopped() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state = stateStopped
}

// authTest returns the bot's user id, or an error that says which setting to fix.
func (c *Channel) authTest(ctx context.Context) (string, error) {
	var res *slackgo.AuthTestResponse
	err := pace.Do(ctx, pace.Policy{Attempts: 3, Base: 500 * time.Millisecond, Max: 30 * time.Second}, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		var err error
		res, err = c.api.AuthTestContext(ctx)
		return classify(err)
	})
	if code := slackError(err); code != "" {
		switch code {
		case "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired":
			return "", fmt.Errorf("slack: the bot token was rejected (%s); check channels.slack.bot_token", code)
		}
		return "", fmt.Errorf("slack: auth.test failed: %s", code)
	}
	if err != nil {
		return "", fmt.Errorf("slack: cannot reach the Slack API at %s: %w", c.cfg.APIURL, c.redact(err))
	}
	return res.UserID, nil
}

// Stop disconnects and waits for the adapter's goroutines, or ctx.
func (c *Channel) Stop(ctx context.Context) error {
	c.mu.Lock()
	prev := c.state
	c.state = stateStopped
	cancel := c.cancel
	c.mu.Unlock()
	if prev != stateRunning || cancel == nil {
		return nil
	}
	cancel()
	if err := channels.Await(ctx, c.wg.Wait); err != nil {
		return fmt.Errorf("slack: stop: %w", err)
	}
	c.setUp(false, nil)
	return nil
}

// running returns the sink and the run context while the adapter is started.
func (c *Channel) running() (channels.Sink, context.Context, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateRunning || c.runCtx == nil {
		return nil, nil, false
	}
	return c.sink, c.runCtx, true
}

// bot is the bot's user id and the pattern of a mention of it.
func (c *Channel) bot() (string, *regexp.Regexp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.botUser, c.mention
}

// setUp reports a connection change to the sink once per change.
func (c *Channel) setUp(up bool, err error) {
	c.mu.Lock()
	changed := c.up != up
	c.up = up
	sink := c.sink
	c.mu.Unlock()
	if changed && sink != nil {
		sink.Connected(Name, up, err)
	}
}

// redact replaces any configured secret in err's text by ***.
func (c *Channel) redact(err error) error {
	if err == nil {
		return nil
	}
	msg := c.scrub(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

func (c *Channel) scrub(s string) string {
	for _, sec := range c.secrets {
		s = strings.ReplaceAll(s, sec, "***")
	}
	return s
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// libLog routes slack-go's own log lines to the adapter's logger at debug level.
type libLog struct{ c *Channel }

func (l libLog) Output(_ int, s string) error {
	l.c.log.Debug("slack-go: " + l.c.scrub(strings.TrimSpace(s)))
	return nil
}

// prune removes downloaded files older than a day, at most once an hour, so that the
// download directory cannot grow without bound.
func (c *Channel) prune() {
	c.mu.Lock()
	if time.Since(c.pruned) < time.Hour {
		c.mu.Unlock()
		return
	}
	c.pruned = time.Now()
	c.mu.Unlock()
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && !e.IsDir() && time.Since(info.ModTime()) > 24*time.Hour {
			os.Remove(filepath.Join(c.dir, e.Name()))
		}
	}
}
